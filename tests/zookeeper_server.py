"""A real ZooKeeper (Debian's `zookeeper` package) as a child process, for tests.

Started as the field notes say: QuorumPeerMain with a generated zoo.cfg on a free loopback
port, the admin server off, `srvr` allowed; ready once `srvr` answers with a `Mode:` line.
`stop()` terminates it by PID (only the process this started).
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter(port: int, word: bytes, timeout_s: float = 1.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


class ZooKeeperServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr",
                    "forceSync=no",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                ]
            )
            + "\n"
        )
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", CLASSPATH,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited; see {log.name}")
            try:
                if b"Mode:" in four_letter(self.port, b"srvr"):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not serve within {timeout_s} s; see {log.name}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
