"""Storage benchmark: appends and sendfile reads of a partition log, next to the same
machine's raw file write and raw sendfile measured in the same run (prints, asserts nothing).

Targets (issue 3): appends >= 70% of raw write for 1 MiB batches; reads >= 80% of raw sendfile.
Both sides work in the page cache (no fsync in the timed part, files written just before).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.storage.log import PartitionLog
from riverlog.storage.log_config import LogConfig

MiB = 1 << 20


def _batches(size: int, count: int) -> list[bytearray]:
    """Distinct writable batches (the log writes offsets into them), built before timing."""
    template = encode_batch([Record(0, int(time.time() * 1000), None, os.urandom(size - 80))])
    return [bytearray(template) for _ in range(count)]


def raw_write(path: Path, chunks: list[bytearray]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for chunk in chunks:
        os.write(fd, chunk)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return sum(len(c) for c in chunks) / elapsed / 1e6


def log_append(directory: Path, chunks: list[bytearray]) -> tuple[float, PartitionLog]:
    log = PartitionLog(directory, LogConfig.from_map({"segment.bytes": str(1 << 30)}))
    start = time.perf_counter()
    for chunk in chunks:
        log.append(chunk, leader_epoch=0)
    elapsed = time.perf_counter() - start
    log.update_high_watermark(log.log_end_offset)
    return sum(len(c) for c in chunks) / elapsed / 1e6, log


class _Sink:
    """A loopback TCP connection whose far end drains everything on a thread."""

    def __init__(self) -> None:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        self.sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
        server.close()
        self.received = 0
        self._thread = threading.Thread(target=self._drain, args=(receiver,), daemon=True)
        self._thread.start()

    def _drain(self, receiver: socket.socket) -> None:
        buf = bytearray(4 * MiB)
        while True:
            n = receiver.recv_into(buf)
            if not n:
                break
            self.received += n
        receiver.close()

    def close(self) -> int:
        self.sender.close()
        self._thread.join()
        return self.received


def _sendfile_all(sock: socket.socket, fd: int, offset: int, length: int) -> None:
    while length:
        sent = os.sendfile(sock.fileno(), fd, offset, length)
        offset += sent
        length -= sent


def raw_sendfile(path: Path, chunk: int) -> float:
    sink = _Sink()
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    start = time.perf_counter()
    for offset in range(0, size, chunk):
        _sendfile_all(sink.sender, fd, offset, min(chunk, size - offset))
    elapsed = time.perf_counter() - start
    os.close(fd)
    assert sink.close() == size
    return size / elapsed / 1e6


def log_sendfile(log: PartitionLog, max_bytes: int, batch_size: int) -> float:
    """Fetch-style reads: PartitionLog.read from an offset, sendfile the region, go on from
    the next whole batch (each batch here holds one record, so offsets advance by batches)."""
    sink = _Sink()
    total = 0
    offset = 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        region = log.read(offset, max_bytes).records
        if region is None:
            break
        _sendfile_all(sink.sender, region.fileno, region.offset, region.length)
        total += region.length
        offset += max(1, region.length // batch_size)
    elapsed = time.perf_counter() - start
    assert sink.close() == total
    return total / elapsed / 1e6


def run(tmp: Path, size: int, count: int, rounds: int = 3) -> None:
    """Best of `rounds`, raw and riverlog alternating, each on fresh files (writeback of
    earlier rounds otherwise throttles whichever side runs later)."""
    label = f"{size // 1024} KiB batches" if size < MiB else f"{size // MiB} MiB batches"
    raw = appended = sent_raw = sent_log = 0.0
    for i in range(rounds):
        raw_path = tmp / f"raw-{size}-{i}.bin"
        raw = max(raw, raw_write(raw_path, _batches(size, count)))
        raw_path.unlink()
        rate, log = log_append(tmp / f"bench-{size}-{i}", _batches(size, count))
        appended = max(appended, rate)
        sent_raw = max(sent_raw, raw_sendfile(log.active.log_path, MiB))
        sent_log = max(sent_log, log_sendfile(log, MiB, size))
        log.delete()
    print(
        f"append, {label:<16} riverlog {appended:8.0f} MB/s   raw write {raw:8.0f} MB/s"
        f"   {appended / raw:5.0%}"
    )
    print(
        f"read (sendfile), {label:<8} riverlog {sent_log:8.0f} MB/s   raw sendfile "
        f"{sent_raw:6.0f} MB/s   {sent_log / sent_raw:5.0%}"
    )


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="riverlog-bench-"))
    try:
        print(
            "page cache on both sides; targets: append >= 70% of raw write (1 MiB), "
            "read >= 80% of raw sendfile"
        )
        run(tmp, MiB, 256)
        run(tmp, 16 * 1024, 8192)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
