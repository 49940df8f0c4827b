"""Prometheus' `GET /metrics` over plain HTTP, for the broker (`metrics.listener`) and the
mirror process: the listener setting's syntax and a minimal server on the running loop.

Invariants: only the host it is given is bound; a request head over 8 KiB, anything but a
GET, or a client silent for 10 s gets no scrape (400 / closed); `/` and `/metrics` answer
the exposition text, any other path 404; one answer per connection (Connection: close).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)
MAX_REQUEST_HEAD = 8192
READ_TIMEOUT_S = 10.0


def parse_listener(text: str) -> tuple[str, int] | None:
    """`http://HOST:PORT` as (host, port); "" as None (no endpoint); ValueError otherwise."""
    if not text:
        return None
    scheme, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if scheme.lower() != "http" or not sep or not colon or not port.isdigit() or "/" in rest:
        raise ValueError(f"metrics.listener {text!r}: expected http://HOST:PORT")
    return host.strip("[]"), int(port)


class MetricsServer:
    """Serves `scrape()`'s exposition text on `host:port` (port 0: a free one, then known)."""

    def __init__(self, scrape: Callable[[], Awaitable[bytes]], host: str, port: int) -> None:
        self._scrape = scrape
        self.host, self.port = host, port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_REQUEST_HEAD
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            parts = head.split(b"\r\n", 1)[0].split(b" ")
            if len(parts) != 3 or parts[0] != b"GET":
                status, body, kind = "400 Bad Request", b"bad request\n", "text/plain"
            elif parts[1].split(b"?", 1)[0] not in (b"/metrics", b"/"):
                status, body, kind = "404 Not Found", b"see /metrics\n", "text/plain"
            else:
                status, body, kind = "200 OK", await self._scrape(), CONTENT_TYPE_LATEST
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: "
                f"{len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass  # the scraper went away or sent too much: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
