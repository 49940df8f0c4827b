"""Helpers for hostile-client tests against a broker process: raw requests, the broker's
memory as the kernel reports it, and a well-behaved producer that must keep working.

`call` speaks the wire protocol over a plain socket (no client library smoothing over what
the broker answers); `rss` reads `/proc/<pid>/status`. Other hostile cases (bad batches,
decompression bombs) use the same helpers and `SteadyProducer` from
`tests/integration/test_hostile_clients.py`'s module broker.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Producer

from riverlog.protocol.api import ApiMessage
from riverlog.protocol.framing import FrameReader, decode_response, encode_request


def address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def call(bootstrap: str, body: ApiMessage, version: int, timeout_s: float = 10) -> ApiMessage:
    """Send one request on a new connection; its decoded response."""
    with socket.create_connection(address(bootstrap), timeout=timeout_s) as sock:
        sock.sendall(encode_request(body, version, correlation_id=7, client_id="hostile"))
        reader = FrameReader()
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            frames = reader.feed(data)
            if frames:
                correlation_id, response = decode_response(frames[0], body.API_KEY, version)
                assert correlation_id == 7
                return response


def closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the broker closes `sock` within `timeout_s` (it sends nothing first)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@dataclass(frozen=True)
class Memory:
    rss_kib: int
    """VmRSS: resident now."""
    hwm_kib: int
    """VmHWM: the peak resident size since the process started."""


def rss(pid: int) -> Memory:
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return Memory(fields["VmRSS"], fields["VmHWM"])


class SteadyProducer:
    """A confluent-kafka producer acknowledging records all along, in its own thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked = 0
        self.failed = 0
        self._stop = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 20000}
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err: object, _msg: object) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed += 1

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(self._topic, b"steady-%d" % i, on_delivery=self._delivered)
                i += 1
            except BufferError:
                pass
            self._producer.poll(0.01)
        self._producer.flush(10)

    def progresses(self, timeout_s: float = 20) -> bool:
        """Whether more records get acknowledged from now on, within `timeout_s`."""
        start = self.acked
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.acked >= start + 5:
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
