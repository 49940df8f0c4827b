"""Committed offsets in memory: the latest commit per group, topic and partition.

The cache mirrors what `__consumer_offsets` holds (the log is the truth; the cache is filled
by replaying it on load and updated after each commit is appended). Retention follows Kafka
2.1+ (KIP-211): offsets of a group that uses group management expire once the group has been
Empty for `offsets.retention.minutes`; offsets of a group that only stores offsets (no
protocol type: "simple" consumers, admin tools) expire that long after their own commit; an
explicit expire timestamp from an old OffsetCommit v2-v4 request wins over both.
"""

from __future__ import annotations

from riverlog.coordinator.group import Group, GroupState
from riverlog.coordinator.records import StoredOffset
from riverlog.model import TopicPartition


class OffsetCache:
    def __init__(self) -> None:
        self._by_group: dict[str, dict[TopicPartition, StoredOffset]] = {}

    def commit(self, group_id: str, offsets: dict[TopicPartition, StoredOffset]) -> None:
        if offsets:
            self._by_group.setdefault(group_id, {}).update(offsets)

    def fetch(
        self, group_id: str, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, StoredOffset]:
        """Committed offsets of the group: all of them, or those of `partitions` that
        have one."""
        stored = self._by_group.get(group_id, {})
        if partitions is None:
            return dict(stored)
        return {tp: stored[tp] for tp in partitions if tp in stored}

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._by_group.get(group_id))

    def groups(self) -> list[str]:
        return list(self._by_group)

    def delete(self, group_id: str, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Forget these partitions' offsets; returns those that had one."""
        stored = self._by_group.get(group_id)
        if not stored:
            return []
        removed = [tp for tp in partitions if stored.pop(tp, None) is not None]
        if not stored:
            del self._by_group[group_id]
        return removed

    def delete_group(self, group_id: str) -> list[TopicPartition]:
        return list(self._by_group.pop(group_id, {}))

    def expired(self, group: Group, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """The group's offsets whose retention has passed (not removed: the caller writes
        tombstones, then calls `delete`)."""
        stored = self._by_group.get(group.group_id)
        if not stored:
            return []
        standalone = group.protocol_type is None
        if not standalone and not group.is_(GroupState.EMPTY):
            return []
        out = []
        for tp, offset in stored.items():
            if offset.expire_timestamp >= 0:
                deadline = offset.expire_timestamp
            elif standalone:
                deadline = offset.commit_timestamp + retention_ms
            else:
                deadline = group.state_timestamp_ms + retention_ms
            if deadline <= now_ms:
                out.append(tp)
        return out
