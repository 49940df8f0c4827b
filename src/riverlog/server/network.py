"""The broker's network layer: one `Connection` per client socket, requests in, answers out.
The listening socket that accepts them is `server/listener.py`'s.

How it works. A `Connection` is an `asyncio.BufferedProtocol`: the event loop receives
straight into memory from its `FrameReader`, which returns whole request frames. Each frame
is decoded and handed to the `Dispatcher`; a handler answers at once (the common case) or
with an awaitable (a long-poll fetch, an acks=all produce). Clients may pipeline: requests
are *started* in arrival order (so appends from one connection keep their order) and
responses are *written* in arrival order whatever order they finish in, as Kafka requires.
A handler answering `None` sends nothing (produce with acks=0). An answer given later is
encoded and written by its future's done callback, with no task of its own: a task
(`_write_in_order`) is started only when the socket cannot take an answer at once.

Response chunks are written with `transport.write`, except `FileRegion`s (record data in
segment files), sent with `os.sendfile` (`server/record_send.py`) — no copy through Python.
When nothing is buffered ahead of a response, its bytes before record data go straight to
the socket with MSG_MORE and the data follows at once with `os.sendfile`, so a fetcher
wakes once per response; what the socket cannot take yet is left to `loop.sendfile`, which
waits for it (measured on 1 MiB fetches: ~20% less broker CPU and ~12% less fetcher CPU per
fetch than `loop.sendfile` alone, which pauses reading and registers for writability on
every call).

Bounds (`server/admission.py`). A frame's size is checked against `socket.request.max.bytes`
from its 4-byte prefix, before anything is allocated, and its buffer grows only as its bytes
arrive. Bytes of requests in flight are reserved from the `queued.max.request.bytes` pool when
a frame's size is read and given back when its response is ready; while the pool is empty
the connection stops reading. A connection over `max.connections` /
`max.connections.per.ip` (+ overrides) is closed on arrival; one idle for
`connections.max.idle.ms` is closed by the listener's reaper (`server/listener.py`).

Client quotas (`server/quotas/manager.py`, KIP-219). While any quota is set, each request's
handler time is measured and the quota manager told of the request and its answer; a
throttle it returns is already in the answer's `throttle_time_ms`, and the connection is
muted — not read — for that long (`mute`), its answers still written.

Errors. A frame whose size is negative or above `socket.request.max.bytes`, or a request that
cannot be decoded, closes that one connection (Kafka does the same); an ApiVersions request
at an unknown version gets an ApiVersions v0 answer with UNSUPPORTED_VERSION so the client can
retry lower. Nothing a client sends reaches another connection.

Security (riverlog.security): a connection belongs to one named listener. On a TLS listener
it starts once its `start_tls` handshake succeeded (`server/listener.py`) and runs on
asyncio's TLS transport: record data cannot be sent with sendfile through
TLS, so a `FileRegion` is read once (`os.pread`) and written once, and nothing is ever sent to
the raw socket; `tls_read` drains each read's TLS records in C where it can. The
connection's principal is `User:ANONYMOUS`, the mapped certificate
subject on TLS, or the SASL login on SASL listeners, where `security.gate.admit` decides which
requests may pass before (re-)authentication; a refused request closes the connection.

Ownership: each `Connection` owns its transport, reader and queue of pending responses, and
adds itself to (and removes itself from) its listener's live connections. Everything
runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from riverlog.protocol.api import ApiMessage
from riverlog.protocol.exceptions import (
    FrameError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from riverlog.protocol.framing import FrameReader, decode_request, encode_response
from riverlog.protocol.messages import ApiVersionsRequest
from riverlog.protocol.primitives import Chunk, FileRegion
from riverlog.security import gate
from riverlog.security.principal import ANONYMOUS
from riverlog.security.sasl import SaslServer
from riverlog.server.record_send import sendfile_now, without_regions

if TYPE_CHECKING:
    import ssl

    from riverlog.clock import Clock
    from riverlog.protocol.framing import Request
    from riverlog.security.rules import Subject
    from riverlog.server.admission import ConnectionQuotas, MemoryPool
    from riverlog.server.dispatch import Dispatcher, Response
    from riverlog.server.quotas.manager import QuotaManager

log = logging.getLogger(__name__)
_perf = time.perf_counter

MAX_IN_FLIGHT_PER_CONNECTION = 64
"""Requests read but not yet answered before the connection stops reading (backpressure)."""


class Listener(Protocol):
    """What a `Connection` reads of the listener that accepted it (`NetworkServer`,
    `server/listener.py`, which imports this module: typed here, not imported)."""

    clock: Clock
    dispatcher: Dispatcher
    client_quotas: QuotaManager | None
    connections: set[Connection]
    listener_name: str
    max_request_bytes: int
    memory: MemoryPool
    quotas: ConnectionQuotas
    ssl_context: ssl.SSLContext | None
    new_sasl: Callable[[], SaslServer] | None
    principal_of_certificate: Callable[[dict[str, object]], str] | None


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in, responses out in request order."""

    def __init__(self, server: Listener) -> None:
        self.server = server
        self._memory = server.memory if server.memory.bounded else None
        self.reader = FrameReader(max_frame_bytes=server.max_request_bytes, memory=self._memory)
        self._ip: str | None = None
        """The client's IP while counted in the server's connection quotas."""
        self._wake_scheduled = False
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = "?"
        """The client's IP address, the `host` of ACLs."""
        self.last_active = self.server.clock.monotonic_s()
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        """Answers not yet written, in request order: futures of a response to encode or of
        its chunks already encoded (`_formats` says which)."""
        self._formats: collections.deque[tuple[int, int] | None] = collections.deque()
        """(version, correlation id) to encode each pending answer with; None: encoded."""
        self._writer: asyncio.Task[None] | None = None
        """Sends an answer the socket could not take at once, and those after it."""
        self._can_write = asyncio.Event()  # set by connection_made: under TLS, requests can
        # arrive (start_tls delivers them) before the transport is handed to us
        self._reading_paused = False
        """Too many answers in flight (`MAX_IN_FLIGHT_PER_CONNECTION`)."""
        self._muted_until = 0.0
        """Monotonic seconds until which a throttled client is not read (`mute`)."""
        self._transport_paused = False
        self._sock: socket.socket | None = None
        """The transport's socket descriptor, to send to straight when nothing is buffered
        (`_send`); detached, never closed, here — the transport owns it."""
        self._burst: list[Chunk] | None = None
        """Answers ready at once while one read's frames are handled: one write for all."""
        self.closed = False
        self.listener = server.listener_name
        self.tls = server.ssl_context is not None
        self.principal = ANONYMOUS
        """Who the client is (`User:<name>`): see the module docstring."""
        self.subject: Subject | None = None
        """The authorizer's view of `principal` (security/authorization.py keeps it)."""
        self.sasl: SaslServer | None = server.new_sasl() if server.new_sasl else None
        self._closing = False
        """Closing once the answers queued are written (`close_after_answers`)."""
        self.produce_order: asyncio.Future[None] | None = None
        """Done once this connection's last produce request that waits before appending
        (KIP-890 verification) has appended: later ones append after it, in request order
        (`handlers/produce.py`)."""

    # --- asyncio.BufferedProtocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._can_write.set()  # answers queued before (see __init__) go now
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self.tls:  # the same descriptor, for MSG_MORE sends (never under TLS)
                with contextlib.suppress(OSError):
                    self._sock = socket.socket(fileno=sock.fileno())
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = str(peer[0]) if peer else "?"
        if self.tls and self.server.principal_of_certificate is not None:
            tls = transport.get_extra_info("ssl_object")
            cert = tls.getpeercert() if tls is not None else None
            if cert:
                self.principal = self.server.principal_of_certificate(cert)
        ip = str(peer[0]) if peer else "?"
        refused = self.server.quotas.admit(ip)
        if refused is not None:
            log.info("%s", refused)
            self.close()
            return
        self._ip = ip
        self.server.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self.server.clock.monotonic_s()
        try:
            frames = self.reader.buffer_updated(nbytes)
        except FrameError as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        self._handle(frames)

    def _handle(self, frames: list[bytes | bytearray | memoryview]) -> None:
        metrics = self.server.dispatcher.metrics if frames else None
        if metrics is not None:
            metrics.begin()  # the read's requests are timed together (metrics/requests.py)
        self._burst = []
        for i, frame in enumerate(frames):
            if self.closed:
                self._release(sum(len(f) for f in frames[i:]))
                break
            self._on_frame(frame)
        burst, self._burst = self._burst, None
        if burst and not self.closed and self.transport is not None:
            if len(burst) == 1:  # the common case: `writelines` would join it first
                self.transport.write(burst[0])  # type: ignore[arg-type]
            else:
                self.transport.writelines(burst)  # type: ignore[arg-type]
        if self._pending and self._writer is None:
            self._write_ready()  # answers queued behind the burst (record data to send)
        if metrics is not None:
            metrics.settle()
        if self.reader.blocked and not self.closed:
            assert self._memory is not None
            self._memory.wait(self._wake)
        if (
            self._transport_paused
            or self._reading_paused
            or self.reader.blocked
            or self._muted_until > 0
        ):
            self._update_reading()  # else reading goes on as it was: no call

    def _wake(self) -> None:
        """The memory pool has budget again: go on after the frame it refused (soon, never
        inside another request's handling, so requests keep their order)."""
        if not self._wake_scheduled and not self.closed:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        self._wake_scheduled = False
        if self.closed:
            return
        try:
            frames = self.reader.resume()
        except FrameError as e:  # a later frame in the buffer announces a bad size
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        self._handle(frames)

    def _update_reading(self) -> None:
        """Read while neither backpressure (answers in flight) nor the pool holds us."""
        transport = self.transport
        if transport is None or self.closed:
            return
        pause = self._reading_paused or self.reader.blocked or self._muted_until > 0
        if pause != self._transport_paused:
            self._transport_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _release(self, nbytes: int) -> None:
        if self._memory is not None:
            self._memory.release(nbytes)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._sock is not None:
            self._sock.detach()  # the transport closes the descriptor
            self._sock = None
        self._can_write.set()
        self.server.connections.discard(self)
        if self._ip is not None:
            self.server.quotas.release(self._ip)
            self._ip = None
        if self._memory is not None:
            self._memory.forget(self._wake)
            reserved, self.reader.reserved = self.reader.reserved, 0
            self._memory.release(reserved)
        for fut in self._pending:
            fut.cancel()
        self._pending.clear()
        self._formats.clear()
        if self._writer is not None:
            self._writer.cancel()

    # --- requests -------------------------------------------------------------------

    def _on_frame(self, frame: bytes | bytearray | memoryview) -> None:
        size = len(frame)
        if self._closing:
            self._release(size)
            return
        sasl = self.sasl
        if sasl is not None and sasl.raw_tokens and sasl.state == "authenticating":
            self._raw_sasl_token(sasl, frame)
            self._release(size)
            return
        try:
            request = decode_request(frame)
        except UnsupportedVersionError as e:
            self._release(size)
            if e.api_key == ApiVersionsRequest.API_KEY and e.correlation_id is not None:
                answer = self.server.dispatcher.unsupported_api_versions()
                self._enqueue(e.correlation_id, 0, answer)
                return
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        except (UnknownApiKeyError, ProtocolError) as e:
            self._release(size)
            log.warning("closing %s: bad request: %s", self.peer, e)
            self.close()
            return
        if sasl is not None:
            refused = gate.admit(sasl, request.api_key, self.server.clock.wall_ms())
            if refused is not None:
                self._release(size)
                log.warning("closing %s (listener %s): %s", self.peer, self.listener, refused)
                self.close()
                return
        del frame  # the request holds what it needs
        quotas = self.server.client_quotas
        started = _perf() if quotas is not None and quotas.active else 0.0
        try:
            result = self.server.dispatcher.dispatch(request, self)
        except Exception as e:
            self._release(size)
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        if started:
            assert quotas is not None
            handler_s = _perf() - started
            if result is None or isinstance(result, ApiMessage):
                self.mute(quotas.throttle(self.principal, request, result, size, handler_s))
            else:
                result = self._throttle_when_done(quotas, request, result, size, handler_s)
        header = request.header  # its fields, not `Request`'s properties (calls)
        self._enqueue(header.correlation_id, header.request_api_version, result)
        if self._memory is None:
            return
        if result is None or isinstance(result, ApiMessage):
            self._release(size)  # answered: the request's bytes are free again
        else:
            self._pending[-1].add_done_callback(lambda _: self._release(size))

    async def _throttle_when_done(
        self,
        quotas: QuotaManager,
        request: Request,
        result: Awaitable[Response],
        size: int,
        handler_s: float,
    ) -> Response:
        response = await result
        self.mute(quotas.throttle(self.principal, request, response, size, handler_s))
        return response

    def mute(self, throttle_ms: int) -> None:
        """Read nothing more from this client for `throttle_ms` (KIP-219: its answer, already
        carrying the throttle, goes out at once)."""
        if throttle_ms <= 0 or self.closed:
            return
        until = self.server.clock.monotonic_s() + throttle_ms / 1000.0
        if until <= self._muted_until:
            return
        self._muted_until = until
        self._update_reading()
        asyncio.get_running_loop().call_later(throttle_ms / 1000.0, self._unmute, until)

    def _unmute(self, until: float) -> None:
        if self._muted_until == until:  # not extended meanwhile
            self._muted_until = 0.0
            self._update_reading()

    def _raw_sasl_token(self, sasl: SaslServer, frame: bytes | bytearray | memoryview) -> None:
        """A token after a v0 SaslHandshake: the frame is the token, the answer is the
        server's token, size-prefixed, with no Kafka header."""
        answer = gate.raw_token(sasl, bytes(frame), self.server.clock.wall_ms())
        if answer is None:
            log.warning(
                "closing %s (listener %s): SASL %s authentication failed",
                self.peer,
                self.listener,
                sasl.mechanism,
            )
            self.close()
            return
        if sasl.principal is not None:
            self.principal = sasl.principal
        if self.transport is not None:
            self.transport.write(len(answer).to_bytes(4, "big") + answer)

    def close_after_answers(self) -> None:
        """Answer what was asked so far, then close; later frames are ignored (a failed SASL
        login is answered, then closed, as Kafka does)."""
        self._closing = True
        asyncio.get_running_loop().call_soon(self._close_if_answered)

    def _close_if_answered(self) -> None:
        """Close once nothing is left to write (called again when the writer finishes)."""
        if self._closing and not self._pending and self._writer is None and not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()  # after the buffered answers

    def _enqueue(
        self, correlation_id: int, version: int, result: Response | Awaitable[Response]
    ) -> None:
        # Not `isinstance(result, Awaitable)`: an ABC check, ~0.3 µs on every request.
        if result is not None and not isinstance(result, ApiMessage):
            # Answered later (a parked fetch, an acks=all produce): encoded and written by
            # the callback of its future, with no task of its own unless the socket is full.
            fut: asyncio.Future[Any] = asyncio.ensure_future(result)
            self._pending.append(fut)
            self._formats.append((version, correlation_id))
            fut.add_done_callback(self._answer_ready)
        else:
            chunks = None if result is None else encode_response(result, version, correlation_id)
            if self.tls and chunks is not None:
                try:
                    chunks = without_regions(chunks)
                except OSError as e:
                    log.warning("closing %s: %s", self.peer, e)
                    self.close()
                    return
            if (
                not self._pending
                and self._writer is None
                and self._can_write.is_set()
                and self.transport is not None
                and (chunks is None or FileRegion not in map(type, chunks))
            ):
                if chunks is not None and self._burst is not None:
                    self._burst.extend(chunks)  # written once the whole read is handled
                elif chunks is not None:
                    self.transport.writelines(chunks)  # type: ignore[arg-type]
                return  # the fast path: nothing queued, nothing to sendfile
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(chunks)
            self._pending.append(fut)
            self._formats.append(None)
            if self._burst is None:  # else `_handle` writes it after the read's burst
                self._write_ready()
        if len(self._pending) >= MAX_IN_FLIGHT_PER_CONNECTION and not self._reading_paused:
            self._reading_paused = True
            self._update_reading()

    def _answer_ready(self, _: asyncio.Future[Any]) -> None:
        if self._burst is None:
            self._write_ready()

    def _next_ready(self) -> list[Chunk] | None:
        """Take the answer at the head of the queue (done) and encode it if it is a
        response; None for no answer (acks=0). Raises what its handler raised."""
        fut = self._pending.popleft()
        answer_as = self._formats.popleft()
        if self._reading_paused and len(self._pending) < MAX_IN_FLIGHT_PER_CONNECTION:
            self._reading_paused = False
            self._update_reading()
        if fut.cancelled():  # e.g. the broker shutting down
            raise ConnectionError("the answer was cancelled")
        result = fut.result()
        if answer_as is None or result is None:
            return result  # type: ignore[no-any-return]  # chunks, or no answer
        version, correlation_id = answer_as
        chunks = encode_response(result, version, correlation_id)
        return without_regions(chunks) if self.tls else chunks

    def _write_ready(self) -> None:
        """Write the answers done at the head of the queue, in order, as far as the socket
        takes them now; where it must wait, a task (`_write_in_order`) carries on."""
        while self._pending and self._writer is None and not self.closed:
            if not self._pending[0].done():
                return
            try:
                chunks = self._next_ready()
                rest = None
                if chunks is not None:
                    rest = self._send_now(chunks) if self._can_write.is_set() else chunks
            except Exception as e:
                self._answer_failed(e)
                return
            if rest:
                self._writer = asyncio.get_running_loop().create_task(self._write_in_order(rest))
                return
        if self._closing:
            self._close_if_answered()

    def _answer_failed(self, e: Exception) -> None:
        transport = self.transport
        if (
            self.closed
            or isinstance(e, ConnectionError)
            or (transport is not None and transport.is_closing())
        ):  # the client went away while being answered: not a broker fault
            log.info("closing %s: gone while being answered: %r", self.peer, e)
        else:
            log.exception("closing %s: failed to answer a request", self.peer)
        self.close()

    async def _write_in_order(self, first: list[Chunk]) -> None:
        """Send `first` (what the socket did not take at once), then the answers after it
        as they are done."""
        try:
            await self._send(first)
            while self._pending and not self.closed:
                if not self._pending[0].done():
                    await self._pending[0]
                chunks = self._next_ready()
                if chunks is not None:
                    await self._send(chunks)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._answer_failed(e)
        finally:
            self._writer = None
            if self._closing:
                self._close_if_answered()

    def _send_now(self, chunks: list[Chunk]) -> list[Chunk] | None:
        """Send what the socket takes without waiting: None when all of it went (or the
        connection is gone), else what is left, from a record region the socket could not
        take whole."""
        transport = self.transport
        if transport is None or self.closed:
            return None
        last = len(chunks) - 1
        for i, chunk in enumerate(chunks):
            direct = self._direct(transport)
            if isinstance(chunk, FileRegion):
                sent = 0 if direct is None else sendfile_now(direct, chunk)
                if sent < chunk.length:  # the socket is full: the loop must wait for it
                    if transport.is_closing():  # the client went away meanwhile
                        return None
                    left = FileRegion(chunk.fileno, chunk.offset + sent, chunk.length - sent)
                    return [left, *chunks[i + 1 :]]
            elif i < last and direct is not None:
                # Bytes with more of the response to follow (a header before record data):
                # MSG_MORE holds them for the rest, so the fetcher wakes once per response,
                # not for the header alone.
                try:
                    sent = direct.send(chunk, socket.MSG_MORE)
                except OSError:  # full, or failing: the transport deals with it
                    sent = 0
                if sent < len(chunk):
                    transport.write(memoryview(chunk)[sent:])
            else:
                transport.write(chunk)
        self.last_active = self.server.clock.monotonic_s()
        return None

    async def _send(self, chunks: list[Chunk]) -> None:
        """Send all of `chunks`, waiting for the socket where it is full."""
        loop = asyncio.get_running_loop()
        rest: list[Chunk] | None = chunks
        while rest:
            await self._can_write.wait()
            rest = self._send_now(rest)
            if not rest:
                return
            region, rest = rest[0], rest[1:]
            assert isinstance(region, FileRegion)
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            with os.fdopen(region.fileno, "rb", buffering=0, closefd=False) as f:
                await loop.sendfile(transport, f, region.offset, region.length)
        self.last_active = self.server.clock.monotonic_s()

    def _direct(self, transport: asyncio.Transport) -> socket.socket | None:
        """The socket, when bytes may go to it straight: nothing buffered ahead, not closing."""
        if self._sock is None or transport.is_closing() or transport.get_write_buffer_size():
            return None
        return self._sock

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()
