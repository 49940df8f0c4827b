"""A listener's accepting side: `NetworkServer` (one named listener's listening socket, its set
of live connections, the idle reaper, the drain at shutdown) and `_TlsHandshake` (a TLS
listener's `start_tls` upgrade). What a connection does once accepted is `server/network.py`.

Invariants. Every accepted socket becomes one `Connection` (server/network.py), on a TLS
listener only after its handshake succeeded: a failed handshake (plaintext on a TLS port, an
untrusted client certificate) is one log line and an aborted socket, and no `Connection`
sees a byte of it. `connections` holds exactly the live connections (each adds itself once
admitted and removes itself when lost); a connection idle for `connections.max.idle.ms` with
no answer pending is closed by the reaper; `drain` waits (bounded) for answers in flight and
then closes every connection. Everything runs on the event loop thread.

Logging: this module logs as `riverlog.server.network`, the logger users set for the network
layer (log4j config, `riverlog configs --entity-type broker-loggers`), as before it was split
from network.py.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from riverlog.clock import SYSTEM_CLOCK, Clock
from riverlog.security.sasl import SaslServer
from riverlog.server import tls_read
from riverlog.server.admission import ConnectionQuotas, MemoryPool
from riverlog.server.network import Connection

if TYPE_CHECKING:
    from riverlog.server.dispatch import Dispatcher
    from riverlog.server.quotas.manager import QuotaManager

log = logging.getLogger("riverlog.server.network")

TLS_HANDSHAKE_TIMEOUT_S = 10.0


class _TlsHandshake(asyncio.Protocol):
    """A TLS listener's new TCP connection, upgraded with `start_tls` before its
    `Connection` takes over — so that a failed handshake (plaintext bytes on a TLS port, an
    untrusted client certificate) is logged in one line, which asyncio's own TLS server does
    only in debug mode."""

    def __init__(self, server: NetworkServer) -> None:
        self.server = server
        self._upgrading: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello waits in the socket for start_tls
        self._upgrading = asyncio.get_running_loop().create_task(self._upgrade(transport))

    async def _upgrade(self, transport: asyncio.Transport) -> None:
        context = self.server.ssl_context
        assert context is not None
        peer = transport.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if peer else "?"
        connection = Connection(self.server)
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport,
                connection,
                context,
                server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
            )
        except (OSError, ConnectionError, TimeoutError, ssl.SSLError) as e:
            log.warning(
                "closing %s (listener %s): TLS handshake failed: %s",
                where,
                self.server.listener_name,
                e,
            )
            transport.abort()
            return
        if tls is None:  # closed meanwhile
            return
        tls_read.install(tls)  # records drained in C where available (server/tls_read.py)
        connection.connection_made(tls)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._upgrading is not None and not self._upgrading.done():
            self._upgrading.cancel()


class NetworkServer:
    """The listening socket of one listener and its connections."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        host: str,
        port: int,
        *,
        max_request_bytes: int,
        max_idle_ms: int,
        listener_name: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        new_sasl: Callable[[], SaslServer] | None = None,
        principal_of_certificate: Callable[[dict[str, object]], str] | None = None,
        memory: MemoryPool | None = None,
        quotas: ConnectionQuotas | None = None,
        clock: Clock = SYSTEM_CLOCK,
        client_quotas: QuotaManager | None = None,
    ) -> None:
        self.clock = clock
        self.client_quotas = client_quotas
        """Client quotas (server/quotas/manager.py): throttle and mute (KIP-219)."""
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.ssl_context = ssl_context
        self.new_sasl = new_sasl
        self.principal_of_certificate = principal_of_certificate
        self.max_request_bytes = max_request_bytes
        self.memory = memory or MemoryPool(-1)
        self.quotas = quotas or ConnectionQuotas(2**31 - 1, 2**31 - 1, {})
        self.max_idle_s = max_idle_ms / 1000.0
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._reaper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        factory: Callable[[], asyncio.BaseProtocol] = (
            (lambda: _TlsHandshake(self)) if self.ssl_context else (lambda: Connection(self))
        )
        self._server = await loop.create_server(
            factory, self.host, self.port, reuse_address=True, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._reaper = loop.create_task(self._reap_idle())

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) for responses in flight, then close every connection."""
        deadline = self.clock.monotonic_s() + timeout_s
        while self.clock.monotonic_s() < deadline and any(c._pending for c in self.connections):
            await asyncio.sleep(0.01)
        if self._reaper is not None:
            self._reaper.cancel()
        for conn in list(self.connections):
            conn.close()

    async def _reap_idle(self) -> None:
        interval = max(0.05, min(self.max_idle_s / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            cutoff = self.clock.monotonic_s() - self.max_idle_s
            for conn in list(self.connections):
                if conn.last_active < cutoff and not conn._pending:
                    log.info("closing idle connection %s", conn.peer)
                    conn.close()
