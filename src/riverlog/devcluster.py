"""Clusters on loopback for development and tests: Debian's ZooKeeper and broker processes.

`ZooKeeperServer` runs the `zookeeper` package's QuorumPeerMain with a generated zoo.cfg
(admin server off, `srvr` allowed, `maxClientCnxns=0`); it is ready once `srvr` answers with a
`Mode:` line. `BrokerProcess` runs `python -m riverlog server --zookeeper ... --broker-id N`
with its own data dir, port and log file; it is ready once its log shows the
"listening on" line. Either can be started detached (a session of its own, so that
`riverlog cluster up` can exit and leave it running) and is only ever signalled by the PID it
was started with — `signal_pid` checks the process is still the one started (its command
line) before signalling, so a recycled PID is never hit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def four_letter(port: int, word: bytes, timeout_s: float = 1.0, host: str = "127.0.0.1") -> bytes:
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


def pid_alive(pid: int, marker: str) -> bool:
    """Whether `pid` is a live (not zombie) process whose command line contains `marker`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and marker.encode() in cmdline


def signal_pid(pid: int, marker: str, sig: int) -> bool:
    """Send `sig` to `pid` if it is still the process started (see `pid_alive`)."""
    if not pid_alive(pid, marker):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, marker: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid, marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class ZooKeeperServer:
    """`host` and `prefix` place the server elsewhere than loopback: an address of another
    network namespace and the command that runs it there (`ip netns exec NAME`)."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        self.directory = directory
        self.port = port if port is not None else free_port()
        self.host = host
        self.prefix = list(prefix)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"

    def start(self, timeout_s: float = 60.0, *, detached: bool = False) -> ZooKeeperServer:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        settings = [
            "tickTime=500",
            f"dataDir={data}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr",
            "forceSync=no",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
        ]
        config.write_text("\n".join(settings) + "\n")
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, "java", "-Xmx256m", "-cp", CLASSPATH, ZOOKEEPER_MAIN, str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detached,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited; see {self.log_file}")
            try:
                if b"Mode:" in four_letter(self.port, b"srvr", host=self.host):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not serve within {timeout_s} s; see {self.log_file}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


class BrokerProcess:
    """One `riverlog server` process in a cluster; restartable on the same port and data.
    `host` and `prefix` as for `ZooKeeperServer`."""

    def __init__(
        self,
        broker_id: int,
        directory: Path,
        zk_connect: str,
        settings: dict[str, str] | None = None,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        self.broker_id = broker_id
        self.host = host
        self.prefix = list(prefix)
        self.port = port if port is not None else free_port()
        self.data_dir = directory / f"broker-{broker_id}"
        self.log_file = directory / f"broker-{broker_id}.log"
        self.zk_connect = zk_connect
        self.settings = settings or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None

    def start(self, timeout_s: float = 30.0, *, detached: bool = False) -> None:
        args = [
            *self.prefix,
            sys.executable,
            "-m",
            "riverlog",
            "server",
            "--listen",
            self.address,
            "--data-dir",
            str(self.data_dir),
            "--zookeeper",
            self.zk_connect,
            "--broker-id",
            str(self.broker_id),
        ]
        for key, value in self.settings.items():
            args += ["--override", f"{key}={value}"]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            start_offset = log.tell()
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detached,
            )
        ready = f"riverlog broker {self.broker_id} listening on".encode()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_file, "rb") as log:
                log.seek(start_offset)
                if ready in log.read():
                    return
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"broker {self.broker_id} exited: see {self.log_file}")
            time.sleep(0.05)
        raise RuntimeError(f"broker {self.broker_id} did not start: see {self.log_file}")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (a clean, controlled shutdown); the exit code."""
        if self.proc is None:
            return 0
        if self.frozen:
            self.thaw()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
            self.frozen = False

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False
