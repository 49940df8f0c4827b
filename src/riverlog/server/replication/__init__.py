"""The replication wing: hosted partitions (pure rules), the replica manager, follower
fetchers, the purgatory and replication throttles."""
