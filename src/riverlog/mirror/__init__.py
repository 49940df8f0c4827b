"""Mirroring between Kafka-protocol clusters on riverlog's own client.

`flow.py` moves records from a source cluster's consumer group to a target cluster's producer
(MirrorMaker 1's loop: send, flush, then commit — at-least-once); `mm1.py` runs it as
`riverlog mirror-maker`. MirrorMaker 2's parts: `mm2_config.py` reads the one properties file,
`policy.py` names remote topics and filters topics and groups, `topic_sync.py` creates and
grows remote topics and copies their configs, `records.py` holds the offset-sync and
checkpoint record formats and the translation of offsets, `checkpoints.py` emits checkpoints
and syncs group offsets, and `mm2.py` runs the enabled flows (`riverlog connect-mirror-maker`).

By default mirroring is at-least-once: a mirror killed between a send and its commit sends the
records again on restart (duplicates on the target, never gaps). `exactly_once.py` commits
records and source offsets (kept in an offsets topic on the target) in one transaction per
source partition, so a killed mirror duplicates nothing for read_committed readers.
`metrics.py` serves a mirror process's Prometheus metrics.
"""
