"""The shared vocabulary of riverlog's layers: names and sentinels that mean the same thing
in the protocol, storage, replication, the controller, the coordinators, the client and the
tools. Kafka's wire values, defined once here so that no layer re-declares them.

Imports only the standard library; every layer may import it.
"""

from __future__ import annotations

TopicPartition = tuple[str, int]
"""A partition by topic name and index."""

NO_LEADER = -1
"""A partition's leader id when no replica leads it."""
LEADER_DURING_DELETE = -2
"""The leader id the controller announces for a partition of a topic being deleted."""

UNKNOWN_OFFSET = -1
"""An offset not known (yet), e.g. a follower's log end before its first fetch."""
UNDEFINED_EPOCH = -1
"""A leader epoch not known: no epoch was ever assigned, or the asker does not say."""

LATEST_TIMESTAMP = -1
"""ListOffsets: the log end (or high watermark / last stable offset for consumers)."""
EARLIEST_TIMESTAMP = -2
"""ListOffsets: the log start offset."""

CONSUMER_REPLICA_ID = -1
"""The replica id of an ordinary consumer's Fetch and ListOffsets requests."""
DEBUGGING_CONSUMER_ID = -2
"""Kafka's `Request.DebuggingConsumerId` (the replica verification tool): a consumer that
may read from any replica, follower or leader, up to that replica's high watermark."""
