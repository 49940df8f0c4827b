"""All partition logs of a broker's log directories (`log.dirs`, JBOD), their checkpoints
and background housekeeping.

Each log directory holds one `<topic>-<partition>/` per log plus Kafka's checkpoint files
for the logs in it: `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `cleaner-offset-checkpoint`, and the
`.kafka_cleanshutdown` marker, present only between a clean shutdown and the next start: with
it, logs load without scanning; without it, every log is recovered from its recovery point.

Directories (`storage/log_dirs.py`): a new log goes to the online directory holding the
fewest logs (Kafka's rule), unless AlterReplicaLogDirs named one for it first; `move` takes
a log to another directory. A directory where an I/O error happens (loading, appending,
reading, flushing, writing checkpoints) goes offline (KIP-112): its logs are closed and
dropped, `on_dir_failure` is told (from whatever thread saw the error), the other
directories carry on. A full disk (ENOSPC, EDQUOT) is not such an error, here as in appends
(`PartitionLog._write`): every write it can cut short is whole or absent afterwards
(checkpoints are written to a temporary file and renamed, the cleaner discards its unfinished
segment), so housekeeping skips that round, warns once per directory until a checkpoint
round succeeds there again, and tries again next tick — but a failed fsync always takes the
directory offline (after one, the kernel may have dropped the dirty pages: retrying it could
report durable what is not). A partition may not be created anew while its directory is
offline (`offline_partitions`).

Housekeeping (`tick`, run by the background thread `start_background`, or by a test directly
with any `now_ms`): the flush.ms policy, retention (every `log.retention.check.interval.ms`),
compaction on the cleaner's own schedule as Kafka's (`log.cleaner.enable`; a log is cleaned
as soon as it is due, and an idle cleaner looks again after `log.cleaner.backoff.ms`),
closing deleted segments after `file.delete.delay.ms`, and checkpoint writes.

Ownership: the manager owns the `PartitionLog` objects and the checkpoint files. Callers use
logs directly for appends and reads; topic creation and deletion go through the manager.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from riverlog.clock import SYSTEM_CLOCK
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.storage import checkpoint, log_dirs
from riverlog.storage.cleaner import LogCleaner
from riverlog.storage.log import PartitionLog, partition_dir_name
from riverlog.storage.log_config import LogConfig
from riverlog.storage.retention import apply_retention

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def disk_full(error: BaseException) -> bool:
    """Whether `error` says the file system has no room (retriable: no directory failure)."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    def __init__(
        self,
        data_dirs: Path | Sequence[Path],
        defaults: Mapping[str, str] | None = None,
        *,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 60_000,
        topic_configs: Mapping[str, Mapping[str, str]] | None = None,
        clock_ms: Callable[[], int] | None = None,
        cleaner_enabled: bool = True,
        cleaner_backoff_ms: int = 15_000,
        on_dir_failure: Callable[[Path], object] | None = None,
    ) -> None:
        given = [data_dirs] if isinstance(data_dirs, Path) else list(data_dirs)
        self.dirs: list[Path] = [log_dirs.canonical(d) for d in given]
        self.offline_dirs: set[Path] = set()
        self._full_dirs: set[Path] = set()  # warned full by housekeeping, not yet written again
        self.on_dir_failure = on_dir_failure
        self.defaults = dict(defaults or {})
        self.retention_check_interval_ms = retention_check_interval_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self._next_clean_ms = 0
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.clock_ms = clock_ms or SYSTEM_CLOCK.wall_ms
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.dir_of: dict[TopicPartition, Path] = {}
        self.preferred_dir: dict[TopicPartition, Path] = {}
        """Directories AlterReplicaLogDirs named for logs not created yet."""
        self.offline_partitions: dict[TopicPartition, Path] = {}
        """The logs of offline directories (as far as they were known)."""
        self.cleaner: LogCleaner | None = None
        self._lock = threading.RLock()
        self._housekeeping = threading.Lock()  # one tick or move at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        if cleaner_enabled:
            self.cleaner = LogCleaner()
        for directory in self.dirs:
            try:
                directory.mkdir(parents=True, exist_ok=True)
                self._load(directory, topic_configs or {})
            except OSError as e:
                log.error("log directory %s failed to load: %s; it is offline", directory, e)
                self._take_offline(directory)
        if not self.online_dirs:
            raise OSError(f"no online log directory among {[str(d) for d in self.dirs]}")

    @property
    def data_dir(self) -> Path:
        """The first log directory."""
        return self.dirs[0]

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.dirs if d not in self.offline_dirs]

    # --- startup and shutdown ----------------------------------------------------------

    @staticmethod
    def _read_checkpoint(directory: Path, name: str) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read_offsets(directory / name)
        except checkpoint.CorruptCheckpointError as e:
            log.warning("ignoring %s: %s", name, e)
            return {}

    def _load(self, data_dir: Path, topic_configs: Mapping[str, Mapping[str, str]]) -> None:
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery = self._read_checkpoint(data_dir, checkpoint.RECOVERY_POINT_FILE)
        starts = self._read_checkpoint(data_dir, checkpoint.LOG_START_OFFSET_FILE)
        watermarks = self._read_checkpoint(data_dir, checkpoint.HIGH_WATERMARK_FILE)
        if self.cleaner is not None:
            self.cleaner.offsets.update(
                self._read_checkpoint(data_dir, checkpoint.CLEANER_OFFSET_FILE)
            )
        log_dirs.complete_moves(data_dir)
        for directory in sorted(data_dir.iterdir()):
            tp = parse_partition_dir(directory.name) if directory.is_dir() else None
            if tp is None:
                continue
            if tp in self.logs:  # a crash in the middle of a move left it in two places
                log.warning("%s is also in %s; keeping that one", directory, self.dir_of[tp])
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
            self.dir_of[tp] = data_dir
        marker.unlink(missing_ok=True)  # from now on a crash is an unclean shutdown
        checkpoint.fsync_dir(data_dir)

    def config_for(self, overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_map({**self.defaults, **overrides})

    def shutdown(self) -> None:
        """Stop housekeeping, close every log cleanly, write checkpoints and the marker in
        each online directory."""
        self.stop_background()
        with self._lock:
            for tp, partition_log in list(self.logs.items()):
                try:
                    partition_log.close(clean=True)
                except OSError as e:
                    self.fail_dir(self.dir_of[tp], e)
            self.write_checkpoints()
            for directory in self.online_dirs:
                try:
                    checkpoint.write_atomically(directory / CLEAN_SHUTDOWN_FILE, b"")
                except OSError as e:
                    self.fail_dir(directory, e)

    # --- logs ----------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(
        self,
        topic: str,
        partition: int,
        overrides: Mapping[str, str] | None = None,
        *,
        is_new: bool = True,
    ) -> PartitionLog:
        """The partition's log, created in the directory AlterReplicaLogDirs named for it or
        else the online one with the fewest logs. KAFKA_STORAGE_ERROR when its directory is
        offline (or none is online), and, as Kafka's, when a partition not `is_new` (the
        controller did not say it was just created here) is missing while a directory is
        offline: its log may be in that directory."""
        key = (topic, partition)
        with self._lock:
            existing = self.logs.get(key)
            if existing is not None:
                return existing
            if key in self.offline_partitions:
                raise KafkaError(
                    error_codes.KAFKA_STORAGE_ERROR,
                    f"log directory {self.offline_partitions[key]} of {topic}-{partition} "
                    "is offline",
                )
            if not is_new and self.offline_dirs:
                offline = ",".join(str(d) for d in sorted(self.offline_dirs))
                raise KafkaError(
                    error_codes.KAFKA_STORAGE_ERROR,
                    f"Can not create log for {topic}-{partition} because log directories "
                    f"{offline} are offline",
                )
            preferred = self.preferred_dir.pop(key, None)
            online = self.online_dirs
            if not online:
                raise KafkaError(error_codes.KAFKA_STORAGE_ERROR, "every log directory is offline")
            target = (
                preferred
                if preferred in online
                else log_dirs.least_loaded(online, list(self.dir_of.values()))
            )
            directory = target / partition_dir_name(topic, partition)
            new_directory = not directory.exists()
            try:
                created = PartitionLog(
                    directory, self.config_for(overrides or {}), clock_ms=self.clock_ms
                )
                if new_directory:
                    # a new directory's name is durable only once its parent is fsynced
                    # (fsync(2)); without this a machine crash loses the whole partition
                    checkpoint.fsync_dir(target)
            except OSError as e:
                self.fail_dir(target, e)
                raise KafkaError(error_codes.KAFKA_STORAGE_ERROR, str(e)) from e
            self.logs[key] = created
            self.dir_of[key] = target
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
            self.dir_of.pop((topic, partition), None)
            self.offline_partitions.pop((topic, partition), None)
        if partition_log is not None:
            partition_log.delete()
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))

    # --- directories ---------------------------------------------------------------------

    def move(self, tp: TopicPartition, destination: Path) -> PartitionLog:
        """Move a log to another online directory (`log_dirs.move_log`); the new
        `PartitionLog`, which the caller puts where the old one was used."""
        with self._housekeeping:  # no flush, retention or cleaning of it meanwhile
            with self._lock:
                old = self.logs[tp]
                source = self.dir_of[tp]
            moved = log_dirs.move_log(old, destination, self.clock_ms)
            with self._lock:
                self.logs[tp] = moved
                self.dir_of[tp] = destination
        self._checkpoint_dirs([source, destination])
        return moved

    def fail_dir(self, directory: Path, error: BaseException | None = None) -> list[TopicPartition]:
        """An I/O error in `directory`: take it offline (once) and tell `on_dir_failure`;
        the logs it held."""
        if self._take_offline(directory):
            log.error("log directory %s failed (%s); its partitions are offline", directory, error)
            if self.on_dir_failure is not None:
                self.on_dir_failure(directory)
        return sorted(tp for tp, d in self.offline_partitions.items() if d == directory)

    def _take_offline(self, directory: Path) -> bool:
        with self._lock:
            if directory in self.offline_dirs:
                return False
            self.offline_dirs.add(directory)
            doomed = [tp for tp, d in self.dir_of.items() if d == directory]
            for tp in doomed:
                self.offline_partitions[tp] = directory
                del self.dir_of[tp]
                partition_log = self.logs.pop(tp)
                with contextlib.suppress(OSError):
                    partition_log.close(clean=False)
        return True

    def _housekeeping_failed(self, directory: Path, error: OSError) -> None:
        """A housekeeping write failed: a full disk skips the round (warned once until
        checkpoints succeed there again); any other error takes the directory offline."""
        if not disk_full(error):
            self.fail_dir(directory, error)
        elif directory not in self._full_dirs:
            self._full_dirs.add(directory)
            log.warning(
                "log directory %s is full (%s): housekeeping retries every round", directory, error
            )

    def dir_for_failure(self, partition_log: PartitionLog) -> Path:
        """The log directory a log lives in (for `fail_dir`)."""
        return log_dirs.canonical(partition_log.directory.parent)

    # --- housekeeping --------------------------------------------------------------------

    def write_checkpoints(self) -> None:
        self._checkpoint_dirs(self.online_dirs)

    def _checkpoint_dirs(self, dirs: list[Path]) -> None:
        for directory in dirs:
            if directory in self.offline_dirs:
                continue
            logs = [(tp, self.logs[tp]) for tp, d in list(self.dir_of.items()) if d == directory]
            try:
                checkpoint.write_offsets(
                    directory / checkpoint.RECOVERY_POINT_FILE,
                    {tp: lg.recovery_point for tp, lg in logs},
                )
                checkpoint.write_offsets(
                    directory / checkpoint.LOG_START_OFFSET_FILE,
                    {tp: lg.log_start_offset for tp, lg in logs},
                )
                checkpoint.write_offsets(
                    directory / checkpoint.HIGH_WATERMARK_FILE,
                    {tp: lg.high_watermark for tp, lg in logs},
                )
                if self.cleaner is not None:
                    self.cleaner.write_checkpoint(directory, [tp for tp, _ in logs])
            except (OSError, KeyError) as e:
                if isinstance(e, KeyError):
                    continue  # a log moved or went offline meanwhile: the next round
                self._housekeeping_failed(directory, e)
            else:
                self._full_dirs.discard(directory)

    def tick(self, now_ms: int | None = None) -> None:
        """One round of housekeeping; an I/O error takes the log's directory offline."""
        with self._housekeeping:
            self._tick(self.clock_ms() if now_ms is None else now_ms)

    def _tick(self, now: int) -> None:
        logs = list(self.logs.values())
        retain = now - self._last_retention_ms >= self.retention_check_interval_ms
        if retain:
            self._last_retention_ms = now
        for partition_log in logs:
            try:
                partition_log.maybe_flush(now)
            except OSError as e:  # never retried: see the module docstring
                self.fail_dir(self.dir_for_failure(partition_log), e)
                continue
            try:
                partition_log.delete_expired_files(now)
                if retain:
                    self._retain(partition_log, now)
            except OSError as e:
                self._housekeeping_failed(self.dir_for_failure(partition_log), e)
        if self.cleaner is not None and now >= self._next_clean_ms:
            self._clean(logs, now)
        if now - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now
            self.write_checkpoints()

    @staticmethod
    def _retain(partition_log: PartitionLog, now: int) -> None:
        deleted = apply_retention(partition_log, now)
        if deleted:
            log.info("%s: retention deleted %d segments", partition_log.directory.name, deleted)

    def _clean(self, logs: list[PartitionLog], now: int) -> None:
        """The cleaner's own schedule, as Kafka's: every compacting log whose dirty part is
        due (`min.cleanable.dirty.ratio`, `min/max.compaction.lag.ms`) is cleaned; when none
        was, the cleaner backs off `log.cleaner.backoff.ms` before looking again."""
        cleaner = self.cleaner
        assert cleaner is not None
        cleaned = 0
        for partition_log in logs:
            if not partition_log.config.compact:
                continue
            try:
                if cleaner.clean_if_needed(partition_log, now):
                    cleaned += 1
            except OSError as e:
                self._housekeeping_failed(self.dir_for_failure(partition_log), e)
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
