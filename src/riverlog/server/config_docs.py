"""Kafka 3.9's type and documentation of every config key riverlog has (topic and broker),
as DescribeConfigs v3+ reports them (`config_type`, `documentation`).

Data only, read from Kafka 3.9's config definitions (`TopicConfig`, `LogConfig`,
`ServerLogConfigs`, `KafkaConfig` and the other `ConfigDef`s). A key whose Kafka doc string
could not be read from those definitions has none here; DescribeConfigs then answers null.
"""

from __future__ import annotations

# DescribeConfigs v3+ config_type codes (Kafka's ConfigType).
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)

CONFIG_TYPES: dict[str, int] = {
    "advertised.listeners": STRING,
    "auto.create.topics.enable": BOOLEAN,
    "auto.leader.rebalance.enable": BOOLEAN,
    "broker.id": INT,
    "broker.rack": STRING,
    "cleanup.policy": LIST,
    "compression.type": STRING,
    "connections.max.idle.ms": LONG,
    "controlled.shutdown.enable": BOOLEAN,
    "controlled.shutdown.max.retries": INT,
    "controlled.shutdown.retry.backoff.ms": LONG,
    "default.replication.factor": INT,
    "delete.retention.ms": LONG,
    "delete.topic.enable": BOOLEAN,
    "file.delete.delay.ms": LONG,
    "flush.messages": LONG,
    "flush.ms": LONG,
    "follower.replication.throttled.rate": LONG,
    "follower.replication.throttled.replicas": LIST,
    "group.initial.rebalance.delay.ms": INT,
    "group.max.session.timeout.ms": INT,
    "group.max.size": INT,
    "group.min.session.timeout.ms": INT,
    "index.interval.bytes": INT,
    "leader.imbalance.check.interval.seconds": LONG,
    "leader.imbalance.per.broker.percentage": INT,
    "leader.replication.throttled.rate": LONG,
    "leader.replication.throttled.replicas": LIST,
    "listeners": STRING,
    "log.cleaner.backoff.ms": LONG,
    "log.cleaner.delete.retention.ms": LONG,
    "log.cleaner.enable": BOOLEAN,
    "log.cleaner.max.compaction.lag.ms": LONG,
    "log.cleaner.min.cleanable.ratio": DOUBLE,
    "log.cleaner.min.compaction.lag.ms": LONG,
    "log.cleaner.threads": INT,
    "log.cleanup.policy": LIST,
    "log.dir": STRING,
    "log.dirs": STRING,
    "log.flush.interval.messages": LONG,
    "log.flush.interval.ms": LONG,
    "log.flush.offset.checkpoint.interval.ms": INT,
    "log.flush.scheduler.interval.ms": LONG,
    "log.index.interval.bytes": INT,
    "log.index.size.max.bytes": INT,
    "log.message.timestamp.after.max.ms": LONG,
    "log.message.timestamp.before.max.ms": LONG,
    "log.message.timestamp.difference.max.ms": LONG,
    "log.message.timestamp.type": STRING,
    "log.retention.bytes": LONG,
    "log.retention.check.interval.ms": LONG,
    "log.retention.hours": INT,
    "log.retention.minutes": INT,
    "log.retention.ms": LONG,
    "log.roll.hours": INT,
    "log.roll.ms": LONG,
    "log.segment.bytes": INT,
    "max.compaction.lag.ms": LONG,
    "max.message.bytes": INT,
    "message.downconversion.enable": BOOLEAN,
    "message.format.version": STRING,
    "message.max.bytes": INT,
    "message.timestamp.after.max.ms": LONG,
    "message.timestamp.before.max.ms": LONG,
    "message.timestamp.difference.max.ms": LONG,
    "message.timestamp.type": STRING,
    "metrics.listener": STRING,  # riverlog's own key (Prometheus endpoint URL)
    "min.cleanable.dirty.ratio": DOUBLE,
    "min.compaction.lag.ms": LONG,
    "min.insync.replicas": INT,
    "num.io.threads": INT,
    "num.network.threads": INT,
    "num.partitions": INT,
    "offset.metadata.max.bytes": INT,
    "offsets.commit.timeout.ms": INT,
    "offsets.load.buffer.size": INT,
    "offsets.retention.check.interval.ms": LONG,
    "offsets.retention.minutes": INT,
    "offsets.topic.num.partitions": INT,
    "offsets.topic.replication.factor": SHORT,
    "offsets.topic.segment.bytes": INT,
    "preallocate": BOOLEAN,
    "quota.window.num": INT,
    "quota.window.size.seconds": INT,
    "replica.fetch.backoff.ms": INT,
    "replica.fetch.max.bytes": INT,
    "replica.fetch.min.bytes": INT,
    "replica.fetch.response.max.bytes": INT,
    "replica.fetch.wait.max.ms": INT,
    "replica.lag.time.max.ms": LONG,
    "replica.selector.class": STRING,
    "retention.bytes": LONG,
    "retention.ms": LONG,
    "segment.bytes": INT,
    "segment.index.bytes": INT,
    "segment.jitter.ms": LONG,
    "segment.ms": LONG,
    "socket.request.max.bytes": INT,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": INT,
    "transaction.max.timeout.ms": INT,
    "transaction.partition.verification.enable": BOOLEAN,
    "transaction.remove.expired.transaction.cleanup.interval.ms": INT,
    "transaction.state.log.min.isr": INT,
    "transaction.state.log.num.partitions": INT,
    "transaction.state.log.replication.factor": SHORT,
    "transaction.state.log.segment.bytes": INT,
    "transactional.id.expiration.ms": INT,
    "unclean.leader.election.enable": BOOLEAN,
    "zookeeper.connect": STRING,
    "zookeeper.session.timeout.ms": INT,
    "zookeeper.connection.timeout.ms": INT,
    "queued.max.request.bytes": LONG,
    "max.connections": INT,
    "max.connections.per.ip": INT,
    "max.connections.per.ip.overrides": STRING,
}

DOCUMENTATION: dict[str, str] = {
    "auto.create.topics.enable": ("Enable auto creation of topic on the server."),
    "broker.id": (
        "The broker id for this server. If unset, a unique broker id will be generated.To "
        "avoid conflicts between ZooKeeper generated broker id's and user configured broker "
        "id's, generated broker ids start from reserved.broker.max.id + 1."
    ),
    "broker.rack": (
        "Rack of the broker. This will be used in rack aware replication assignment for fault "
        "tolerance. Examples: <code>RACK1</code>, <code>us-east-1d</code>"
    ),
    "cleanup.policy": (
        'This config designates the retention policy to use on log segments. The "delete" '
        "policy (which is the default) will discard old segments when their retention time or "
        'size limit has been reached. The "compact" policy will enable <a '
        'href="#compaction">log compaction</a>, which retains the latest value for each key. '
        "It is also possible to specify both policies in a comma-separated list (e.g. "
        '"delete,compact"). In this case, old segments will be discarded per the retention '
        "time and size configuration, while retained segments will be compacted."
    ),
    "compression.type": (
        "Specify the final compression type for a given topic. This configuration accepts the "
        "standard compression codecs ('gzip', 'snappy', 'lz4', 'zstd'). It additionally "
        "accepts 'uncompressed' which is equivalent to no compression; and 'producer' which "
        "means retain the original compression codec set by the producer."
    ),
    "connections.max.idle.ms": (
        "Idle connections timeout: the server socket processor threads close the connections "
        "that idle more than this"
    ),
    "controlled.shutdown.enable": ("Enable controlled shutdown of the server."),
    "controlled.shutdown.max.retries": (
        "Controlled shutdown can fail for multiple reasons. This determines the number of "
        "retries when such failure happens"
    ),
    "controlled.shutdown.retry.backoff.ms": (
        "Before each retry, the system needs time to recover from the state that caused the "
        "previous failure (Controller fail over, replica lag etc). This config determines the "
        "amount of time to wait before retrying."
    ),
    "default.replication.factor": (
        "The replication factor for automatically created topics, and for topics created with "
        "-1 as the replication factor"
    ),
    "delete.retention.ms": (
        'The amount of time to retain delete tombstone markers for <a href="#compaction">log '
        "compacted</a> topics. This setting also gives a bound on the time in which a consumer "
        "must complete a read if they begin from offset 0 to ensure that they get a valid "
        "snapshot of the final stage (otherwise delete tombstones may be collected before they "
        "complete their scan)."
    ),
    "delete.topic.enable": (
        "Enables delete topic. Delete topic through the admin tool will have no effect if this "
        "config is turned off"
    ),
    "file.delete.delay.ms": ("The time to wait before deleting a file from the filesystem"),
    "flush.messages": (
        "This setting allows specifying an interval at which we will force an fsync of data "
        "written to the log. For example if this was set to 1 we would fsync after every "
        "message; if it were 5 we would fsync after every five messages. In general we "
        "recommend you not set this and use replication for durability and allow the operating "
        "system's background flush capabilities as it is more efficient. This setting can be "
        'overridden on a per-topic basis (see <a href="#topicconfigs">the per-topic '
        "configuration section</a>)."
    ),
    "flush.ms": (
        "This setting allows specifying a time interval at which we will force an fsync of "
        "data written to the log. For example if this was set to 1000 we would fsync after "
        "1000 ms had passed. In general we recommend you not set this and use replication for "
        "durability and allow the operating system's background flush capabilities as it is "
        "more efficient."
    ),
    "group.initial.rebalance.delay.ms": (
        "The amount of time the group coordinator will wait for more consumers to join a new "
        "group before performing the first rebalance. A longer delay means potentially fewer "
        "rebalances, but increases the time until processing begins."
    ),
    "group.max.session.timeout.ms": (
        "The maximum allowed session timeout for registered consumers. Longer timeouts give "
        "consumers more time to process messages in between heartbeats at the cost of a longer "
        "time to detect failures."
    ),
    "group.max.size": (
        "The maximum number of consumers that a single consumer group can accommodate."
    ),
    "group.min.session.timeout.ms": (
        "The minimum allowed session timeout for registered consumers. Shorter timeouts result "
        "in quicker failure detection at the cost of more frequent consumer heartbeating, "
        "which can overwhelm broker resources."
    ),
    "index.interval.bytes": (
        "This setting controls how frequently Kafka adds an index entry to its offset index. "
        "The default setting ensures that we index a message roughly every 4096 bytes. More "
        "indexing allows reads to jump closer to the exact position in the log but makes the "
        "index larger. You probably don't need to change this."
    ),
    "leader.imbalance.check.interval.seconds": (
        "The frequency with which the controller checks if it should perform an unclean leader "
        "election for leaderless partitions."
    ),
    "leader.imbalance.per.broker.percentage": (
        "The ratio of leader imbalance allowed per broker. The controller would trigger a "
        "leader balance if it goes above this value per broker. The value is specified in "
        "percentage."
    ),
    "log.cleaner.backoff.ms": ("The amount of time to sleep when there are no logs to clean"),
    "log.cleaner.enable": (
        "Enable the log cleaner process to run on the server. Should be enabled if using any "
        "topics with a cleanup.policy=compact including the internal offsets topic. If "
        "disabled those topics will not be compacted and continually grow in size."
    ),
    "log.cleaner.threads": ("The number of background threads to use for log cleaning"),
    "log.cleanup.policy": (
        "The default cleanup policy for segments beyond the retention window. A comma "
        'separated list of valid policies. Valid policies are: "delete" and "compact"'
    ),
    "log.dir": ("The directory in which the log data is kept (supplemental for log.dirs property)"),
    "log.dirs": (
        "A comma-separated list of the directories where the log data is stored. If not set, "
        "the value in log.dir is used."
    ),
    "log.flush.interval.messages": (
        "The number of messages accumulated on a log partition before messages are flushed to disk."
    ),
    "log.flush.offset.checkpoint.interval.ms": (
        "The frequency with which we update the persistent record of the last flush which acts "
        "as the log recovery point."
    ),
    "log.flush.scheduler.interval.ms": (
        "The frequency in ms that the log flusher checks whether any log needs to be flushed "
        "to disk"
    ),
    "log.index.interval.bytes": ("The interval with which we add an entry to the offset index."),
    "log.index.size.max.bytes": ("The maximum size in bytes of the offset index"),
    "log.message.timestamp.after.max.ms": (
        "This configuration sets the allowable timestamp difference between the message "
        "timestamp and the broker's timestamp. The message timestamp can be later than or "
        "equal to the broker's timestamp, with the maximum allowable difference determined by "
        "the value set in this configuration. If log.message.timestamp.type=CreateTime, the "
        "message will be rejected if the difference in timestamps exceeds this specified "
        "threshold. This configuration is ignored if log.message.timestamp.type=LogAppendTime."
    ),
    "log.message.timestamp.before.max.ms": (
        "This configuration sets the allowable timestamp difference between the broker's "
        "timestamp and the message timestamp. The message timestamp can be earlier than or "
        "equal to the broker's timestamp, with the maximum allowable difference determined by "
        "the value set in this configuration. If log.message.timestamp.type=CreateTime, the "
        "message will be rejected if the difference in timestamps exceeds this specified "
        "threshold. This configuration is ignored if log.message.timestamp.type=LogAppendTime."
    ),
    "log.message.timestamp.difference.max.ms": (
        "[DEPRECATED] The maximum difference allowed between the timestamp when a broker "
        "receives a message and the timestamp specified in the message. If "
        "log.message.timestamp.type=CreateTime, a message will be rejected if the difference "
        "in timestamp exceeds this threshold. This configuration is ignored if "
        "log.message.timestamp.type=LogAppendTime.The maximum timestamp difference allowed "
        "should be no greater than log.retention.ms to avoid unnecessarily frequent log "
        "rolling."
    ),
    "log.message.timestamp.type": (
        "Define whether the timestamp in the message is message create time or log append "
        "time. The value should be either <code>CreateTime</code> or "
        "<code>LogAppendTime</code>."
    ),
    "log.retention.bytes": ("The maximum size of the log before deleting it"),
    "log.retention.check.interval.ms": (
        "The frequency in milliseconds that the log cleaner checks whether any log is eligible "
        "for deletion"
    ),
    "log.segment.bytes": ("The maximum size of a single log file"),
    "max.compaction.lag.ms": (
        "The maximum time a message will remain ineligible for compaction in the log. Only "
        "applicable for logs that are being compacted."
    ),
    "max.message.bytes": (
        "The largest record batch size allowed by Kafka (after compression if compression is "
        "enabled). If this is increased and there are consumers older than 0.10.2, the "
        "consumers' fetch size must also be increased so that they can fetch record batches "
        "this large. In the latest message format version, records are always grouped into "
        "batches for efficiency. In previous message format versions, uncompressed records are "
        "not grouped into batches and this limit only applies to a single record in that case."
    ),
    "message.downconversion.enable": (
        "This configuration controls whether down-conversion of message formats is enabled to "
        "satisfy consume requests. When set to <code>false</code>, broker will not perform "
        "down-conversion for consumers expecting an older message format. The broker responds "
        "with <code>UNSUPPORTED_VERSION</code> error for consume requests from such older "
        "clients. This configurationdoes not apply to any message format conversion that might "
        "be required for replication to followers."
    ),
    "message.format.version": (
        "[DEPRECATED] Specify the message format version the broker will use to append "
        "messages to the logs. The value of this config is always assumed to be `3.0` if "
        "`inter.broker.protocol.version` is 3.0 or higher (the actual config value is "
        "ignored). Otherwise, the value should be a valid ApiVersion. Some examples are: "
        "0.10.0, 1.1, 2.8, 3.0. By setting a particular message format version, the user is "
        "certifying that all the existing messages on disk are smaller or equal than the "
        "specified version. Setting this value incorrectly will cause consumers with older "
        "versions to break as they will receive messages with a format that they don't "
        "understand."
    ),
    "message.max.bytes": (
        "The largest record batch size allowed by Kafka (after compression if compression is "
        "enabled). If this is increased and there are consumers older than 0.10.2, the "
        "consumers' fetch size must also be increased so that they can fetch record batches "
        "this large. In the latest message format version, records are always grouped into "
        "batches for efficiency. In previous message format versions, uncompressed records are "
        "not grouped into batches and this limit only applies to a single record in that "
        "case.This can be set per topic with the topic level <code>max.message.bytes</code> "
        "config."
    ),
    "message.timestamp.after.max.ms": (
        "This configuration sets the allowable timestamp difference between the message "
        "timestamp and the broker's timestamp. The message timestamp can be later than or "
        "equal to the broker's timestamp, with the maximum allowable difference determined by "
        "the value set in this configuration. If message.timestamp.type=CreateTime, the "
        "message will be rejected if the difference in timestamps exceeds this specified "
        "threshold. This configuration is ignored if message.timestamp.type=LogAppendTime."
    ),
    "message.timestamp.before.max.ms": (
        "This configuration sets the allowable timestamp difference between the broker's "
        "timestamp and the message timestamp. The message timestamp can be earlier than or "
        "equal to the broker's timestamp, with the maximum allowable difference determined by "
        "the value set in this configuration. If message.timestamp.type=CreateTime, the "
        "message will be rejected if the difference in timestamps exceeds this specified "
        "threshold. This configuration is ignored if message.timestamp.type=LogAppendTime."
    ),
    "message.timestamp.difference.max.ms": (
        "[DEPRECATED] The maximum difference allowed between the timestamp when a broker "
        "receives a message and the timestamp specified in the message. If "
        "message.timestamp.type=CreateTime, a message will be rejected if the difference in "
        "timestamp exceeds this threshold. This configuration is ignored if "
        "message.timestamp.type=LogAppendTime."
    ),
    "message.timestamp.type": (
        "Define whether the timestamp in the message is message create time or log append "
        "time. The value should be either `CreateTime` or `LogAppendTime`"
    ),
    "min.cleanable.dirty.ratio": (
        "This configuration controls how frequently the log compactor will attempt to clean "
        'the log (assuming <a href="#compaction">log compaction</a> is enabled). By default '
        "we will avoid cleaning a log where more than 50% of the log has been compacted. This "
        "ratio bounds the maximum space wasted in the log by duplicates (at 50% at most 50% of "
        "the log could be duplicates). A higher ratio will mean fewer, more efficient "
        "cleanings but will mean more wasted space in the log. If the max.compaction.lag.ms or "
        "the min.compaction.lag.ms configurations are also specified, then the log compactor "
        "considers the log to be eligible for compaction as soon as either: (i) the dirty "
        "ratio threshold has been met and the log has had dirty (uncompacted) records for at "
        "least the min.compaction.lag.ms duration, or (ii) if the log has had dirty "
        "(uncompacted) records for at most the max.compaction.lag.ms period."
    ),
    "min.compaction.lag.ms": (
        "The minimum time a message will remain uncompacted in the log. Only applicable for "
        "logs that are being compacted."
    ),
    "min.insync.replicas": (
        'When a producer sets acks to "all" (or "-1"), <code>min.insync.replicas</code> '
        "specifies the minimum number of replicas that must acknowledge a write for the write "
        "to be considered successful. If this minimum cannot be met, then the producer will "
        "raise an exception (either <code>NotEnoughReplicas</code> or "
        "<code>NotEnoughReplicasAfterAppend</code>).<br>When used together, "
        "<code>min.insync.replicas</code> and acks allow you to enforce greater durability "
        "guarantees. A typical scenario would be to create a topic with a replication factor "
        'of 3, set <code>min.insync.replicas</code> to 2, and produce with acks of "all". '
        "This will ensure that the producer raises an exception if a majority of replicas do "
        "not receive a write."
    ),
    "num.io.threads": (
        "The number of threads that the server uses for processing requests, which may include "
        "disk I/O"
    ),
    "num.network.threads": (
        "The number of threads that the server uses for receiving requests from the network "
        "and sending responses to the network. Noted: each listener (except for controller "
        "listener) creates its own thread pool."
    ),
    "num.partitions": ("The default number of log partitions per topic"),
    "offset.metadata.max.bytes": (
        "The maximum size for a metadata entry associated with an offset commit."
    ),
    "offsets.commit.timeout.ms": (
        "Offset commit will be delayed until all replicas for the offsets topic receive the "
        "commit or this timeout is reached. This is similar to the producer request timeout."
    ),
    "offsets.load.buffer.size": (
        "Batch size for reading from the offsets segments when loading offsets into the cache "
        "(soft-limit, overridden if records are too large)."
    ),
    "offsets.retention.check.interval.ms": ("Frequency at which to check for stale offsets"),
    "offsets.topic.num.partitions": (
        "The number of partitions for the offset commit topic (should not change after deployment)."
    ),
    "offsets.topic.replication.factor": (
        "The replication factor for the offsets topic (set higher to ensure availability). "
        "Internal topic creation will fail until the cluster size meets this replication "
        "factor requirement."
    ),
    "offsets.topic.segment.bytes": (
        "The offsets topic segment bytes should be kept relatively small in order to "
        "facilitate faster log compaction and cache loads."
    ),
    "preallocate": (
        "True if we should preallocate the file on disk when creating a new log segment."
    ),
    "replica.fetch.max.bytes": (
        "The number of bytes of messages to attempt to fetch for each partition. This is not "
        "an absolute maximum, if the first record batch in the first non-empty partition of "
        "the fetch is larger than this value, the record batch will still be returned to "
        "ensure that progress can be made. The maximum record batch size accepted by the "
        "broker is defined via <code>message.max.bytes</code> (broker config) or "
        "<code>max.message.bytes</code> (topic config)."
    ),
    "quota.window.num": "The number of samples to retain in memory for client quotas",
    "quota.window.size.seconds": "The time span of each sample for client quotas",
    "replica.fetch.backoff.ms": "The amount of time to sleep when fetch partition error occurs.",
    "replica.fetch.min.bytes": (
        "Minimum bytes expected for each fetch response. If not enough bytes, wait up to "
        "<code>replica.fetch.wait.max.ms</code> (broker config)."
    ),
    "replica.fetch.response.max.bytes": (
        "Maximum bytes expected for the entire fetch response. Records are fetched in batches, "
        "and if the first record batch in the first non-empty partition of the fetch is larger "
        "than this value, the record batch will still be returned to ensure that progress can "
        "be made. As such, this is not an absolute maximum. The maximum record batch size "
        "accepted by the broker is defined via <code>message.max.bytes</code> (broker config) "
        "or <code>max.message.bytes</code> (topic config)."
    ),
    "replica.fetch.wait.max.ms": (
        "The maximum wait time for each fetcher request issued by follower replicas. This "
        "value should always be less than the replica.lag.time.max.ms at all times to prevent "
        "frequent shrinking of ISR for low throughput topics"
    ),
    "replica.lag.time.max.ms": (
        "If a follower hasn't sent any fetch requests or hasn't consumed up to the leaders log "
        "end offset for at least this time, the leader will remove the follower from isr"
    ),
    "replica.selector.class": (
        "The fully qualified class name that implements ReplicaSelector. This is used by the "
        "broker to find the preferred read replica. By default, we use an implementation that "
        "returns the leader."
    ),
    "retention.bytes": (
        "This configuration controls the maximum size a partition (which consists of log "
        "segments) can grow to before we will discard old log segments to free up space if we "
        'are using the "delete" retention policy. By default there is no size limit only a '
        "time limit. Since this limit is enforced at the partition level, multiply it by the "
        "number of partitions to compute the topic retention in bytes. Additionally, "
        'retention.bytes configuration operates independently of "segment.ms" and '
        '"segment.bytes" configurations. Moreover, it triggers the rolling of new segment if '
        "the retention.bytes is configured to zero."
    ),
    "retention.ms": (
        "This configuration controls the maximum time we will retain a log before we will "
        'discard old log segments to free up space if we are using the "delete" retention '
        "policy. This represents an SLA on how soon consumers must read their data. If set to "
        "-1, no time limit is applied. Additionally, retention.ms configuration operates "
        'independently of "segment.ms" and "segment.bytes" configurations. Moreover, it '
        "triggers the rolling of new segment if the retention.ms condition is satisfied."
    ),
    "segment.bytes": (
        "This configuration controls the segment file size for the log. Retention and cleaning "
        "is always done a file at a time so a larger segment size means fewer files but less "
        "granular control over retention."
    ),
    "segment.index.bytes": (
        "This configuration controls the size of the index that maps offsets to file "
        "positions. We preallocate this index file and shrink it only after log rolls. You "
        "generally should not need to change this setting."
    ),
    "segment.jitter.ms": (
        "The maximum random jitter subtracted from the scheduled segment roll time to avoid "
        "thundering herds of segment rolling"
    ),
    "segment.ms": (
        "This configuration controls the period of time after which Kafka will force the log "
        "to roll even if the segment file isn't full to ensure that retention can delete or "
        "compact old data."
    ),
    "socket.request.max.bytes": ("The maximum number of bytes in a socket request"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "The interval at which to rollback transactions that have timed out"
    ),
    "transaction.max.timeout.ms": (
        "The maximum allowed timeout for transactions. If a client\u2019s requested "
        "transaction time exceed this, then the broker will return an error in "
        "InitProducerIdRequest. This prevents a client from too large of a timeout, which can "
        "stall consumers reading from topics included in the transaction."
    ),
    "transaction.partition.verification.enable": (
        "Enable verification that checks that the partition has been added to the transaction "
        "before writing transactional records to the partition"
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "The interval at which to remove transactions that have expired due to "
        "<code>transactional.id.expiration.ms</code> passing"
    ),
    "transaction.state.log.min.isr": (
        "The minimum number of replicas that must acknowledge a write to transaction topic in "
        "order to be considered successful."
    ),
    "transaction.state.log.num.partitions": (
        "The number of partitions for the transaction topic (should not change after deployment)."
    ),
    "transaction.state.log.replication.factor": (
        "The replication factor for the transaction topic (set higher to ensure availability). "
        "Internal topic creation will fail until the cluster size meets this replication "
        "factor requirement."
    ),
    "transaction.state.log.segment.bytes": (
        "The transaction topic segment bytes should be kept relatively small in order to "
        "facilitate faster log compaction and cache loads"
    ),
    "transactional.id.expiration.ms": (
        "The time in ms that the transaction coordinator will wait without receiving any "
        "transaction status updates for the current transaction before expiring its "
        "transactional id. Transactional IDs will not expire while a the transaction is still "
        "ongoing."
    ),
    "unclean.leader.election.enable": (
        "Indicates whether to enable replicas not in the ISR set to be elected as leader as a "
        "last resort, even though doing so may result in data loss.<p>Note: In KRaft mode, "
        "when enabling this config dynamically, it needs to wait for the unclean leader "
        "electionthread to trigger election periodically (default is 5 minutes). Please run "
        "`kafka-leader-election.sh` with `unclean` option to trigger the unclean leader "
        "election immediately if needed.</p>"
    ),
    "zookeeper.connect": (
        "Specifies the ZooKeeper connection string in the form <code>hostname:port</code> "
        "where host and port are the host and port of a ZooKeeper server. To allow connecting "
        "through other ZooKeeper nodes when that ZooKeeper machine is down you can also "
        "specify multiple hosts in the form "
        "<code>hostname1:port1,hostname2:port2,hostname3:port3</code>.\nThe server can also "
        "have a ZooKeeper chroot path as part of its ZooKeeper connection string which puts "
        "its data under some path in the global ZooKeeper namespace. For example to give a "
        "chroot path of <code>/chroot/path</code> you would give the connection string as "
        "<code>hostname1:port1,hostname2:port2,hostname3:port3/chroot/path</code>."
    ),
    "zookeeper.session.timeout.ms": ("Zookeeper session timeout"),
    "zookeeper.connection.timeout.ms": (
        "The max time that the client waits to establish a connection to ZooKeeper. If not "
        "set, the value in zookeeper.session.timeout.ms is used"
    ),
    "queued.max.request.bytes": (
        "The number of queued bytes allowed before no more requests are read"
    ),
    "max.connections": (
        "The maximum number of connections we allow in the broker at any time. This limit is "
        "applied in addition to any per-ip limits configured using max.connections.per.ip."
    ),
    "max.connections.per.ip": (
        "The maximum number of connections we allow from each ip address. This can be set "
        "to 0 if there are overrides configured using max.connections.per.ip.overrides "
        "property. New connections from the ip address are dropped if the limit is reached."
    ),
    "max.connections.per.ip.overrides": (
        "A comma-separated list of per-ip or hostname overrides to the default maximum "
        'number of connections. An example value is "hostName:100,127.0.0.1:200"'
    ),
}
