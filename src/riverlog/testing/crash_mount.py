"""A crashable disk for tests: `crashfs.py` mounted at a directory, served by its own
process, with the machine crash as one call.

    with CrashMount(tmp_path / "backing", tmp_path / "disk") as disk:
        ... a broker with log.dirs=disk.mountpoint writes ...
        broker.kill()                 # the processes die with the machine
        disk.crash()                  # the page cache is gone: only what was synced remains
        disk.mount()                  # the reboot: a fresh mount of the same backing dir

`why_not()` says why this machine cannot do it (not root, no /dev/fuse, no mfusepy or
libfuse3), so tests skip with that reason.

Invariants: every step has a deadline; `close` (also on any failure, also twice) leaves no
mount and no process behind: it unmounts (lazily if something still holds the mount) and
kills the server by its PID if it does not end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any


def why_not() -> str | None:
    """Why a crash mount cannot work here, or None."""
    if os.geteuid() != 0:
        return "mounting FUSE needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the kernel has no FUSE)"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (pip install -e '.[dev]')"
    try:
        import mfusepy  # noqa: F401  (loads libfuse)
    except (OSError, AttributeError) as e:  # no libfuse, or one it cannot read the version of
        return f"libfuse cannot be loaded (apt-get install fuse3): {e}"
    return None


class CrashMountError(RuntimeError):
    pass


class CrashMount:
    def __init__(self, backing: Path, mountpoint: Path, timeout_s: float = 20.0) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.log_file = mountpoint.with_name(mountpoint.name + ".crashfs.log")
        self.crashes: list[dict[str, Any]] = []

    def __enter__(self) -> CrashMount:
        try:
            self.mount()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- life ---------------------------------------------------------------------------

    def mount(self) -> None:
        """Start a server on the backing directory and wait until the mount is there."""
        if self.proc is not None:
            raise CrashMountError("already mounted")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "a") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "riverlog.testing.crashfs",
                    str(self.backing),
                    str(self.mountpoint),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        deadline = time.monotonic() + self.timeout_s
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._stop()
                tail = self.log_file.read_text(errors="replace")[-2000:]
                raise CrashMountError(f"crashfs did not mount {self.mountpoint}: {tail}")
            time.sleep(0.02)

    def command(self, line: str) -> dict[str, Any]:
        if self.proc is None:
            raise CrashMountError("not mounted")
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(line + "\n")
        stdin.flush()
        answer = _read_line(stdout, self.timeout_s)
        if answer is None:
            raise CrashMountError(f"crashfs did not answer {line!r}")
        reply: dict[str, Any] = json.loads(answer)
        if "error" in reply:
            raise CrashMountError(reply["error"])
        return reply

    def pending(self) -> dict[str, Any]:
        """Bytes written and not synced, names not durable yet."""
        return self.command("pending")

    def crash(self, writeback: float = 0.0, seed: int = 0) -> dict[str, Any]:
        """The machine loses power: every unsynced byte is lost (but for the dirty pages
        written back beforehand, each with probability `writeback`), names never made
        durable are undone, and the mount goes away. What was lost, as crashfs counted it.
        Whatever still has files open on the mount gets EIO until it is gone."""
        report = self.command(f"crash {writeback} {seed}")
        self.crashes.append(report)
        self._stop()
        return report

    def close(self) -> None:
        """Unmount (pending data is written by nobody: it is simply gone) and stop."""
        if self.proc is not None:
            self._stop()
        elif os.path.ismount(self.mountpoint):
            _umount(self.mountpoint)

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        _umount(self.mountpoint)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:  # a mount still held open (unmounted lazily) keeps the server alive: end it
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(self.timeout_s)
        if os.path.ismount(self.mountpoint):
            _umount(self.mountpoint)


def _umount(mountpoint: Path) -> None:
    done = subprocess.run(["umount", str(mountpoint)], capture_output=True, timeout=30)
    if done.returncode != 0 and os.path.ismount(mountpoint):
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, timeout=30)


def _read_line(stream: IO[str], timeout_s: float) -> str | None:
    """One line from `stream`, or None if none came within `timeout_s` (or it ended)."""
    import select

    ready, _, _ = select.select([stream], [], [], timeout_s)
    if not ready:
        return None
    line = stream.readline()
    return line or None
