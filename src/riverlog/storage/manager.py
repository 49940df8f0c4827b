"""All partition logs of one data directory, their checkpoints and background housekeeping.

The data directory holds one `<topic>-<partition>/` per log plus Kafka's checkpoint files:
`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `cleaner-offset-checkpoint`, and the
`.kafka_cleanshutdown` marker, present only between a clean shutdown and the next start: with
it, logs load without scanning; without it, every log is recovered from its recovery point.

Housekeeping (`tick`, run by the background thread `start_background`, or by a test directly
with any `now_ms`): the flush.ms policy, retention (every `log.retention.check.interval.ms`),
compaction on the cleaner's own schedule as Kafka's (`log.cleaner.enable`; a log is cleaned
as soon as it is due, and an idle cleaner looks again after `log.cleaner.backoff.ms`),
closing deleted segments after `file.delete.delay.ms`, and checkpoint writes.

Ownership: the manager owns the `PartitionLog` objects and the checkpoint files. Callers use
logs directly for appends and reads; topic creation and deletion go through the manager.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from riverlog.clock import SYSTEM_CLOCK
from riverlog.model import TopicPartition
from riverlog.storage import checkpoint
from riverlog.storage.cleaner import LogCleaner
from riverlog.storage.log import PartitionLog, partition_dir_name
from riverlog.storage.log_config import LogConfig
from riverlog.storage.retention import apply_retention

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        defaults: Mapping[str, str] | None = None,
        *,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 60_000,
        topic_configs: Mapping[str, Mapping[str, str]] | None = None,
        clock_ms: Callable[[], int] | None = None,
        cleaner_enabled: bool = True,
        cleaner_backoff_ms: int = 15_000,
    ) -> None:
        self.data_dir = data_dir
        self.defaults = dict(defaults or {})
        self.retention_check_interval_ms = retention_check_interval_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self._next_clean_ms = 0
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.clock_ms = clock_ms or SYSTEM_CLOCK.wall_ms
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.cleaner: LogCleaner | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        if cleaner_enabled:
            self.cleaner = LogCleaner.from_checkpoint(data_dir)
        self._load(topic_configs or {})

    # --- startup and shutdown ----------------------------------------------------------

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read_offsets(self.data_dir / name)
        except checkpoint.CorruptCheckpointError as e:
            log.warning("ignoring %s: %s", name, e)
            return {}

    def _load(self, topic_configs: Mapping[str, Mapping[str, str]]) -> None:
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery = self._read_checkpoint(checkpoint.RECOVERY_POINT_FILE)
        starts = self._read_checkpoint(checkpoint.LOG_START_OFFSET_FILE)
        watermarks = self._read_checkpoint(checkpoint.HIGH_WATERMARK_FILE)
        for directory in sorted(self.data_dir.iterdir()):
            tp = parse_partition_dir(directory.name) if directory.is_dir() else None
            if tp is None:
                continue
            config = self.config_for(topic_configs.get(tp[0], {}))
            partition_log = PartitionLog(
                directory,
                config,
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0),
                clean_shutdown=clean and tp in recovery,
                clock_ms=self.clock_ms,
            )
            partition_log.update_high_watermark(watermarks.get(tp, 0))
            self.logs[tp] = partition_log
        marker.unlink(missing_ok=True)  # from now on a crash is an unclean shutdown
        checkpoint.fsync_dir(self.data_dir)

    def config_for(self, overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_map({**self.defaults, **overrides})

    def shutdown(self) -> None:
        """Stop housekeeping, close every log cleanly, write checkpoints and the marker."""
        self.stop_background()
        with self._lock:
            for partition_log in self.logs.values():
                partition_log.close(clean=True)
            self.write_checkpoints()
            checkpoint.write_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE, b"")

    # --- logs ----------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(
        self, topic: str, partition: int, overrides: Mapping[str, str] | None = None
    ) -> PartitionLog:
        with self._lock:
            existing = self.logs.get((topic, partition))
            if existing is not None:
                return existing
            directory = self.data_dir / partition_dir_name(topic, partition)
            new_directory = not directory.exists()
            created = PartitionLog(
                directory, self.config_for(overrides or {}), clock_ms=self.clock_ms
            )
            if new_directory:
                # a new directory's name is durable only once its parent is fsynced (fsync(2));
                # without this a machine crash loses the whole partition, flushed data and all
                checkpoint.fsync_dir(self.data_dir)
            self.logs[(topic, partition)] = created
            return created

    def update_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Apply changed topic configs to the topic's logs (new appends and housekeeping)."""
        config = self.config_for(overrides)
        for (name, _), partition_log in self.logs.items():
            if name == topic:
                partition_log.config = config

    def update_defaults(
        self, defaults: Mapping[str, str], overrides: Mapping[str, Mapping[str, str]]
    ) -> None:
        """New broker-level defaults (a dynamic broker config changed): every log gets them
        under its topic's `overrides`."""
        self.defaults = dict(defaults)
        for (topic, _), partition_log in list(self.logs.items()):
            partition_log.config = self.config_for(overrides.get(topic, {}))

    def delete(self, topic: str, partition: int) -> None:
        with self._lock:
            partition_log = self.logs.pop((topic, partition), None)
        if partition_log is not None:
            partition_log.delete()
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))

    # --- housekeeping --------------------------------------------------------------------

    def write_checkpoints(self) -> None:
        logs = list(self.logs.items())
        checkpoint.write_offsets(
            self.data_dir / checkpoint.RECOVERY_POINT_FILE,
            {tp: lg.recovery_point for tp, lg in logs},
        )
        checkpoint.write_offsets(
            self.data_dir / checkpoint.LOG_START_OFFSET_FILE,
            {tp: lg.log_start_offset for tp, lg in logs},
        )
        checkpoint.write_offsets(
            self.data_dir / checkpoint.HIGH_WATERMARK_FILE,
            {tp: lg.high_watermark for tp, lg in logs},
        )
        if self.cleaner is not None:
            self.cleaner.write_checkpoint(self.data_dir)

    def tick(self, now_ms: int | None = None) -> None:
        """One round of housekeeping."""
        now = self.clock_ms() if now_ms is None else now_ms
        logs = list(self.logs.values())
        for partition_log in logs:
            partition_log.maybe_flush(now)
            partition_log.delete_expired_files(now)
        if now - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now
            for partition_log in logs:
                deleted = apply_retention(partition_log, now)
                if deleted:
                    log.info(
                        "%s: retention deleted %d segments", partition_log.directory.name, deleted
                    )
        if self.cleaner is not None and now >= self._next_clean_ms:
            self._clean(logs, now)
        if now - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now
            self.write_checkpoints()

    def _clean(self, logs: list[PartitionLog], now: int) -> None:
        """The cleaner's own schedule, as Kafka's: every compacting log whose dirty part is
        due (`min.cleanable.dirty.ratio`, `min/max.compaction.lag.ms`) is cleaned; when none
        was, the cleaner backs off `log.cleaner.backoff.ms` before looking again."""
        assert self.cleaner is not None
        cleaned = 0
        for partition_log in logs:
            if partition_log.config.compact and self.cleaner.clean_if_needed(partition_log, now):
                cleaned += 1
        self._next_clean_ms = now if cleaned else now + self.cleaner_backoff_ms

    def start_background(self, interval_s: float = 1.0) -> None:
        def run() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.tick()
                except Exception:
                    log.exception("log housekeeping failed")

        self._thread = threading.Thread(target=run, name="riverlog-log-manager", daemon=True)
        self._thread.start()

    def stop_background(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
