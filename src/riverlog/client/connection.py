"""One client connection to a broker: requests out, responses matched by correlation id.

How it works. `Connection.open` connects with an `asyncio.BufferedProtocol` (`_Socket`): the
event loop receives straight into the memory of the codec's `FrameReader` — a large response
(a fetch of record data) into a buffer of its own, allocated whole when its size is read and
reused for the next once nothing views it, which the decoded records then view, with no copy
through Python — and negotiates versions with ApiVersions: `send` picks, for each
request, the highest version both sides support (`version_for`). Requests may be pipelined;
each awaits its own future, resolved by correlation id. A response that cannot be decoded, or a
closed socket, fails every request in flight with `ConnectionError` — the caller reconnects.
A request unanswered within its timeout (the connection's `request_timeout_s`, or the one the
call gives) closes the connection too: `RequestTimeoutError`, a `ConnectionError`.

Security (`client/security.py`): with a `ClientSecurity`, the connection is TLS when the
protocol says so and logs in with SASL right after ApiVersions; when the broker gives the
login a lifetime (KIP-368) the connection logs in again at ~90% of it, before the next
request, so the broker never has to close it.

Errors from the protocol stay Kafka error codes in the response bodies; this layer raises only
for transport problems and for APIs the broker does not support (`UnsupportedVersionError`).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Callable
from typing import cast

from riverlog.client.security import PLAINTEXT_SECURITY, ClientSecurity, authenticate
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.exceptions import ProtocolError, UnsupportedVersionError
from riverlog.protocol.framing import FrameReader, decode_response, encode_request
from riverlog.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

CLIENT_SOFTWARE_NAME = "riverlog"
REAUTH_FRACTION = 0.9
PLAINTEXT = PLAINTEXT_SECURITY
LOWAT_MIN_BYTES = 64 * 1024
"""A big response with at least this much still to come wakes the reader only once it is
all there (SO_RCVLOWAT), not for every few TCP segments."""
LOWAT_MAX_BYTES = 4 << 20


class RequestTimeoutError(ConnectionError):
    """A request unanswered in time; its connection was closed."""


class _Socket(asyncio.BufferedProtocol):
    """The transport side of one `Connection`: frames in, write flow control out."""

    def __init__(self) -> None:
        self.frames = FrameReader(trusted=True)  # a broker's answers to our requests
        self.transport: asyncio.Transport | None = None
        self.on_frame: Callable[[bytes | bytearray | memoryview], None] = lambda frame: None
        self.on_lost: Callable[[BaseException], None] = lambda error: None
        self.lost = asyncio.get_running_loop().create_future()
        """Done when the socket is closed."""
        self._error: BaseException | None = None
        self._writable: asyncio.Future[None] | None = None
        self._raw: socket.socket | None = None
        """The TCP socket, to set its receive low-water mark (None: TLS, or not TCP)."""
        self._lowat = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        raw = transport.get_extra_info("socket")
        if (
            raw is not None
            and raw.family in (socket.AF_INET, socket.AF_INET6)
            and transport.get_extra_info("sslcontext") is None
            and hasattr(socket, "SO_RCVLOWAT")
        ):
            self._raw = raw

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            for frame in self.frames.buffer_updated(nbytes):
                self.on_frame(frame)
        except ProtocolError as e:
            self._error = ConnectionError(f"connection failed: {e}")
            assert self.transport is not None
            self.transport.abort()
            return
        if self._raw is not None:
            self._wake_when_whole()

    def _wake_when_whole(self) -> None:
        """While a big response is arriving, have the kernel report the socket readable
        only once the rest of it is there (or the receive window closes, or the peer
        hangs up: TCP reports those regardless), so a 1 MiB fetch response wakes the
        event loop once instead of once per few segments (issue 29); back to any byte
        after it."""
        awaited = self.frames.awaited
        want = min(awaited, LOWAT_MAX_BYTES) if awaited >= LOWAT_MIN_BYTES else 1
        if want != self._lowat:
            try:
                self._raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)  # type: ignore[union-attr]
            except OSError:  # closing: nothing left to wait for
                self._raw = None
                return
            self._lowat = want

    def eof_received(self) -> bool:
        return False  # the broker closed its side: close ours (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        error = self._error or (
            ConnectionError(f"connection failed: {exc}")
            if exc is not None
            else ConnectionError("the broker closed the connection")
        )
        self.on_lost(error)
        self.resume_writing()  # a writer waiting to drain finds the connection closed
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    async def drain(self) -> None:
        """Until the transport's write buffer is below its high-water mark; ConnectionError
        if the socket is closed."""
        if self._writable is not None:
            await asyncio.shield(self._writable)
        if self.lost.done():
            raise ConnectionError("the connection is closed")


class Connection:
    def __init__(
        self,
        transport: asyncio.Transport,
        protocol: _Socket,
        client_id: str,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self._reauth_at: float | None = None
        self._reauth: asyncio.Task[None] | None = None
        self._transport = transport
        self._protocol = protocol
        self.client_id = client_id
        self.request_timeout_s: float | None = None
        """How long a request may go unanswered when `send` is given no timeout (None: no
        limit); set by whoever owns the connection, e.g. to `request.timeout.ms`."""
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[ApiMessage], int, int]] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.closed = False
        peer = transport.get_extra_info("peername")
        self.address: tuple[str, int] = (peer[0], peer[1]) if peer else ("", 0)
        """The broker's (host, port) as connected to."""
        protocol.on_frame = self._deliver
        protocol.on_lost = self._fail_pending

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str = "riverlog",
        timeout_s: float = 10.0,
        security: ClientSecurity = PLAINTEXT,
    ) -> Connection:
        context = security.ssl_context
        async with asyncio.timeout(timeout_s):
            transport, protocol = await asyncio.get_running_loop().create_connection(
                _Socket, host, port, ssl=context, server_hostname=host if context else None
            )
        conn = cls(transport, protocol, client_id, security)
        try:
            async with asyncio.timeout(timeout_s):
                await conn._negotiate()
                if security.uses_sasl:
                    await conn._login()
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _login(self) -> None:
        lifetime_ms = await authenticate(self, self.security)
        now = asyncio.get_running_loop().time()
        self._reauth_at = now + lifetime_ms * REAUTH_FRACTION / 1000 if lifetime_ms else None

    async def _reauthenticate_if_due(self) -> None:
        if self._reauth_at is None or asyncio.get_running_loop().time() < self._reauth_at:
            return
        if self._reauth is None or self._reauth.done():
            self._reauth_at = None
            self._reauth = asyncio.get_running_loop().create_task(self._login())
        await asyncio.shield(self._reauth)

    async def _negotiate(self) -> None:
        request = ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version="0.1"
        )
        response = await self._call(request, ApiVersionsRequest.MAX_VERSION)
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code != 0:  # an older broker: it answered v0 with its versions
            response = await self._call(ApiVersionsRequest(), 0)
            assert isinstance(response, ApiVersionsResponse)
        self.broker_versions = {
            k.api_key: (k.min_version, k.max_version) for k in response.api_keys
        }

    def version_for(self, request_cls: type[ApiMessage]) -> int:
        broker = self.broker_versions.get(request_cls.API_KEY)
        if broker is None or broker[0] > request_cls.MAX_VERSION:
            raise UnsupportedVersionError(
                request_cls.NAME, -1, request_cls.MIN_VERSION, request_cls.MAX_VERSION
            )
        return min(broker[1], request_cls.MAX_VERSION)

    async def send(
        self, request: ApiMessage, version: int | None = None, *, timeout_s: float | None = None
    ) -> ApiMessage:
        """Send at the negotiated version (or `version`); the decoded response body. A broker
        silent for `timeout_s` (default: `request_timeout_s`) counts as gone: the connection
        is closed (its other answers can no longer be trusted to come) and
        `RequestTimeoutError` raised, a ConnectionError as a disconnect is."""
        if self._reauth_at is not None:
            await self._reauthenticate_if_due()
        chosen = self.version_for(type(request)) if version is None else version
        if timeout_s is None:
            timeout_s = self.request_timeout_s
        if timeout_s is None:
            return await self._call(request, chosen)
        try:
            async with asyncio.timeout(timeout_s):
                return await self._call(request, chosen)
        except TimeoutError:
            await self.close()
            host, port = self.address
            raise RequestTimeoutError(
                f"{host}:{port} did not answer {request.NAME} within {timeout_s:g} s"
            ) from None

    async def send_no_response(self, request: ApiMessage, version: int | None = None) -> None:
        """For produce with acks=0, which the broker does not answer."""
        chosen = self.version_for(type(request)) if version is None else version
        self._write(request, chosen, next(self._correlation))
        await self._protocol.drain()

    def _write(self, request: ApiMessage, version: int, correlation_id: int) -> None:
        if self.closed:
            raise ConnectionError("the connection is closed")
        self._transport.write(encode_request(request, version, correlation_id, self.client_id))

    async def _call(self, request: ApiMessage, version: int) -> ApiMessage:
        correlation_id = next(self._correlation)
        future: asyncio.Future[ApiMessage] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, request.API_KEY, version)
        try:
            self._write(request, version, correlation_id)
            await self._protocol.drain()
            return await future
        finally:
            self._pending.pop(correlation_id, None)

    def _fail_pending(self, error: BaseException) -> None:
        self.closed = True
        for future, _, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)

    def _deliver(self, frame: bytes | bytearray | memoryview) -> None:
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        pending = self._pending.get(correlation_id)
        if pending is None:
            return  # a response to a request whose caller gave up
        future, api_key, version = pending
        _, body = decode_response(frame, api_key, version)
        if not future.done():
            future.set_result(body)

    def abort(self) -> None:
        """Drop the connection at once: every request in flight fails with ConnectionError
        (for an owner that watches its own deadlines)."""
        self._transport.abort()

    async def close(self) -> None:
        self.closed = True
        self._transport.close()
        await asyncio.shield(self._protocol.lost)


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` as (host, port) pairs."""
    out = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad bootstrap server {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    return out


async def connect_any(
    servers: str, client_id: str = "riverlog", security: ClientSecurity = PLAINTEXT
) -> Connection:
    """A connection to the first bootstrap server that answers."""
    last: Exception | None = None
    for host, port in parse_bootstrap(servers):
        try:
            return await Connection.open(host, port, client_id=client_id, security=security)
        except (OSError, TimeoutError, ConnectionError) as e:
            last = e
    raise ConnectionError(f"no bootstrap server of {servers} answered: {last}")
