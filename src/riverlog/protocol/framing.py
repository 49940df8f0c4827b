"""Framing: size prefixes, request/response headers, and splitting a byte stream into frames.

Every Kafka message on the wire is `size:int32` followed by `size` bytes: a header, then the
body. Which header version is used follows from the API key and version:

- requests use header v2 (compact client id kept classic, tagged fields) when the API version
  is flexible, else v1 (with client id) — except ControlledShutdown v0, which uses header v0;
- responses use header v1 (tagged fields) when flexible, else v0 — except ApiVersions, whose
  response always uses header v0 so that a client can read it before versions are agreed.

`FrameReader` is the sans-I/O half of a connection's read side. It fits
`asyncio.BufferedProtocol`: `get_buffer()` hands out memory to receive into and
`buffer_updated(n)` returns the frames completed. Small frames are copied out of a shared
buffer (cheap); a frame larger than the shared buffer's free space gets its own allocation and
the rest of it is received straight into it, so big produce requests are never copied. On a
broker every buffer grows with the bytes that arrive, never with the size a peer announces.
A client's reader (`trusted`: responses of the broker it asked) allocates a big frame whole
once its size is read, as Kafka's clients do, and reuses that buffer for the next big frame
once nothing holds it any more: a follower's fetches then land in memory already in use,
with no growth, copy or fill per fetch (issue 29).
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from riverlog.protocol.api import ENCODE_ERRORS, ApiMessage, Buffer
from riverlog.protocol.exceptions import (
    EncodeError,
    FrameError,
    FrameTooLargeError,
    TruncatedError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from riverlog.protocol.messages import (
    REQUESTS,
    RESPONSES,
    ApiVersionsRequest,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
    ResponseHeader,
)
from riverlog.protocol.primitives import ZERO_UUID, Chunk, FileRegion, coalesce_chunks

_SIZE = struct.Struct(">i")
_ONE_BUFFER_LIMIT = 65536
"""In-memory answers below this size are joined into one buffer; larger ones keep their
big record chunks un-copied."""
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_HEADER_DECODERS = RequestHeader._DECODERS
"""Request header decoders by header version (0-2)."""

PRODUCE_API_KEY = ProduceRequest.API_KEY

CONTROLLED_SHUTDOWN_API_KEY = 7
"""ControlledShutdown v0 is the one request sent with request header v0 (no client id)."""

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
"""Kafka's default `socket.request.max.bytes` (100 MiB)."""


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_API_KEY and api_version == 0:
        return 0
    cls = REQUESTS.get(api_key)
    if cls is not None and cls.is_flexible(api_version):
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiVersionsRequest.API_KEY:
        return 0
    cls = RESPONSES.get(api_key)
    if cls is not None and cls.is_flexible(api_version):
        return 1
    return 0


@dataclass(slots=True)
class Request:
    """A decoded request: its header and its body."""

    header: RequestHeader
    body: ApiMessage

    @property
    def api_key(self) -> int:
        return self.header.request_api_key

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


FastProduce = Callable[[memoryview, int], "Request | None"]
FastProduceAnswer = Callable[[ApiMessage, int, int], bytes | None]


def _produce_extension() -> ModuleType | None:
    """`_produce.c`, given the generated classes it builds and encodes; None where it was not
    built or with `RIVERLOG_PURE_PYTHON` set (the generated code then serves alone)."""
    if os.environ.get("RIVERLOG_PURE_PYTHON"):
        return None
    try:
        from riverlog.protocol import _produce  # type: ignore[attr-defined]
    except ImportError:
        return None
    ext: ModuleType = _produce
    ext.install_produce(
        Request,
        RequestHeader,
        ProduceRequest,
        ProduceRequest.TopicProduceData,
        ProduceRequest.PartitionProduceData,
        ZERO_UUID,
    )
    ext.install_produce_response(
        ProduceResponse,
        ProduceResponse.TopicProduceResponse,
        ProduceResponse.PartitionProduceResponse,
    )
    return ext


_PRODUCE = _produce_extension()

FAST_PRODUCE: FastProduce | None = None if _PRODUCE is None else _PRODUCE.decode_produce
"""A whole Produce request (v3-v12) of the plain shape decoded in C, as the generated
decoders decode it (issue 29: ~300 bytecodes and ~12 calls of a one-record request); None
for anything else, which the generated decoders then decode and refuse precisely. The
tests compare both on arbitrary and damaged requests."""

FAST_PRODUCE_ANSWER: FastProduceAnswer | None = (
    None if _PRODUCE is None else _PRODUCE.encode_produce_response
)
"""A whole ProduceResponse frame (v3-v12) of the plain shape encoded in C, byte for byte as
`encode_response` joins it (issue 29: ~200 bytecodes of every produce answer); None for
anything else, which the generated encoders then encode. Tested against them."""


def encode_request(
    body: ApiMessage, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """A whole request frame, size prefix included."""
    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out: list[Chunk] = [b""]
    header.write_to(out, request_header_version(body.API_KEY, version))
    body.write_to(out, version)
    payload = b"".join(out[1:])  # type: ignore[arg-type]  # requests hold no FileRegion
    return _SIZE.pack(len(payload)) + payload


def peek_request_header(frame: Buffer) -> tuple[int, int, int]:
    """`(api_key, api_version, correlation_id)` of a request frame, readable at any version."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise TruncatedError("request frame is shorter than its header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def decode_request(frame: Buffer) -> Request:
    """Decode a request frame (without its size prefix).

    Raises `UnknownApiKeyError` / `UnsupportedVersionError` carrying the correlation id, so the
    server can still answer (Kafka answers an ApiVersions request of an unknown version with
    an ApiVersions v0 response holding UNSUPPORTED_VERSION), and `DecodeError`s for bad bytes.
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    api_key, api_version, correlation_id = peek_request_header(buf)
    cls = REQUESTS.get(api_key)
    if cls is None:
        raise UnknownApiKeyError(api_key, correlation_id)
    if not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        raise UnsupportedVersionError(
            cls.NAME,
            api_version,
            cls.MIN_VERSION,
            cls.MAX_VERSION,
            api_key=api_key,
            correlation_id=correlation_id,
        )
    if api_key == PRODUCE_API_KEY and FAST_PRODUCE is not None:
        decoded = FAST_PRODUCE(buf, api_version)  # the plain case in C, else None
        if decoded is not None:
            return decoded
    # The header's and body's versions are known good here: their decoders are called
    # straight (`read_from` would check the versions again, a call each, on every request).
    if api_version >= cls.FLEXIBLE_FROM:
        header_version = 2
    elif api_key == CONTROLLED_SHUTDOWN_API_KEY and api_version == 0:
        header_version = 0
    else:
        header_version = 1
    try:
        header, pos = _HEADER_DECODERS[header_version](buf, 0)
        # Bytes after the body are ignored, as Kafka's own parser does: librdkafka 2.x sends
        # three stray bytes after a flexible Metadata request for all topics (its null array
        # count is written into a 4-byte placeholder), and Kafka accepts it.
        body, _ = cls._DECODERS[api_version](buf, pos)
    except struct.error as e:
        raise TruncatedError(f"{cls.NAME} v{api_version}: buffer ended inside a field") from e
    return Request(header, body)


def encode_response(body: ApiMessage, version: int, correlation_id: int) -> list[Chunk]:
    """A whole response frame as chunks (size prefix first); record data stays un-copied."""
    if type(body) is ProduceResponse and FAST_PRODUCE_ANSWER is not None:
        whole = FAST_PRODUCE_ANSWER(body, version, correlation_id)  # the plain case in C
        if whole is not None:
            return [whole]
    # The response header is the correlation id, then (flexible header v1) no tagged fields.
    flexible_header = version >= body.FLEXIBLE_FROM and body.API_KEY != ApiVersionsRequest.API_KEY
    out: list[Chunk] = [_SIZE.pack(correlation_id)]
    if flexible_header:
        out.append(b"\x00")
    # `body.write_to(out, version)` without its two calls (every response; issue 29)
    if not body.MIN_VERSION <= version <= body.MAX_VERSION:
        body.write_to(out, version)  # raises UnsupportedVersionError
    try:
        body._ENCODERS[version](body, out)
    except ENCODE_ERRORS as e:
        raise EncodeError(f"cannot encode {body.NAME} v{version}: {e}") from e
    size = sum(map(len, out))  # C-level loops: a response is tens of chunks (issue 29)
    if size < _ONE_BUFFER_LIMIT and FileRegion not in map(type, out):  # one buffer
        out.insert(0, _SIZE.pack(size))
        return [b"".join(out)]  # type: ignore[arg-type]
    return coalesce_chunks([_SIZE.pack(size), *out])


def decode_response(frame: Buffer, api_key: int, version: int) -> tuple[int, ApiMessage]:
    """Decode a response frame (without size prefix) to `(correlation_id, body)`."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise UnknownApiKeyError(api_key)
    header, pos = ResponseHeader.read_from(buf, 0, response_header_version(api_key, version))
    return header.correlation_id, cls.decode(buf[pos:], version)


class FrameMemory(Protocol):
    """A budget for bytes of requests in flight (the server's `queued.max.request.bytes`)."""

    def try_reserve(self, nbytes: int) -> bool: ...


BIG_FRAME_FIRST_BYTES = 64 * 1024
"""A big frame's own buffer starts at this size (or at what has arrived) and doubles as
its bytes arrive: announcing a size allocates nothing."""


SPARE_MAX_BYTES = 16 << 20
"""A trusted reader keeps a big frame's buffer for the next one up to this size (a follower
fetches at most `replica.fetch.response.max.bytes`, 10 MiB by default)."""


_ZEROS = memoryview(bytes(1 << 20))
"""Zero bytes to grow big frame buffers with: `bytes(n)` for each growth cost a calloc and
a memset of n bytes (a third of a follower's user-space instructions per fetched MiB,
issue 29). Its pages are never written, so they take no resident memory."""


def _grow(buffer: bytearray, nbytes: int) -> None:
    """Append `nbytes` zero bytes to `buffer` in place (raises BufferError while a view of
    it is held)."""
    while nbytes > 0:
        step = min(nbytes, len(_ZEROS))
        buffer.extend(_ZEROS[:step])
        nbytes -= step


class FrameReader:
    """Splits a byte stream into frames (size prefixes removed); see the module docstring.

    Owns its buffers; frames it returns belong to the caller. Raises `FrameTooLargeError`
    for a size above `max_frame_bytes` and `FrameError` for a negative size: the connection
    cannot be trusted after either — both are checked from the 4-byte size, before anything
    is allocated for the frame. Memory grows only with bytes received: the shared buffer
    starts at `initial_bytes` and grows to `buffer_bytes` when busy, and a big frame's own
    buffer doubles as it fills — except with `trusted`, where a big frame's buffer is
    allocated whole (or the previous one's reused) when its size is read; such a reader
    may return a big frame as a `memoryview` of a larger buffer.

    With `memory`, a frame's whole size is reserved from it when its size is read, before
    its body is kept; when the reservation is refused the reader stops (`blocked`) until
    `resume()`. The caller owns the reservation of each frame returned (`len(frame)` bytes)
    and of the frame in progress (`reserved`) and gives them back to the budget.
    """

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        buffer_bytes: int = 256 * 1024,
        *,
        initial_bytes: int = 16 * 1024,
        memory: FrameMemory | None = None,
        trusted: bool = False,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.buffer_bytes = buffer_bytes
        self.memory = memory
        self.trusted = trusted
        self._spare: bytearray | None = None
        """The last big frame's buffer (`trusted` readers), for the next one."""
        self._shared = bytearray(min(initial_bytes, buffer_bytes))
        self._start = 0  # first unconsumed byte in _shared
        self._end = 0  # end of received bytes in _shared
        self._big: bytearray | None = None  # a large frame being received in place
        self._big_size = 0  # the whole size of the large frame
        self._big_filled = 0
        self.reserved = 0
        """Bytes reserved from `memory` for the frame in progress (not yet returned)."""
        self.blocked = False
        """`memory` refused the next frame's reservation: no more frames until `resume`."""

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Memory to receive the next bytes into (`BufferedProtocol.get_buffer`)."""
        big = self._big
        if big is not None:
            if self._big_filled == len(big):  # grow with what arrives, doubling
                grow = min(self._big_size, 2 * len(big)) - len(big)
                try:
                    _grow(big, grow)  # in place (realloc), no copy of what arrived
                except BufferError:  # a view of the last buffer is still held: copy
                    big = self._big = big + bytes(grow)
            return memoryview(big)[self._big_filled : self._big_size]
        if self._end == len(self._shared):
            self._compact()
        return memoryview(self._shared)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes | bytearray | memoryview]:
        """Account for `nbytes` received into the last buffer; return completed frames."""
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < self._big_size:
                return []
            big = self._big
            self._big = None
            self.reserved = 0
            return [big if len(big) == self._big_size else memoryview(big)[: self._big_size]]
        self._end += nbytes
        return self._split()

    @property
    def awaited(self) -> int:
        """Bytes still to come of the big frame being received in place (0: none)."""
        return self._big_size - self._big_filled if self._big is not None else 0

    def resume(self) -> list[bytes | bytearray | memoryview]:
        """After `blocked`: try the reservation again; the frames now completed."""
        self.blocked = False
        return self._split()

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray | memoryview]:
        """Convenience for tests and blocking sockets: receive `data`, return frames."""
        frames: list[bytes | bytearray | memoryview] = []
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            target.release()  # as an event loop does, so the buffer may grow in place
            view = view[n:]
            frames += self.buffer_updated(n)
        return frames

    def _split(self) -> list[bytes | bytearray | memoryview]:
        frames: list[bytes | bytearray | memoryview] = []
        shared = self._shared
        memory = self.memory
        while self._end - self._start >= 4 and not self.blocked:
            (size,) = _SIZE.unpack_from(shared, self._start)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLargeError(size, self.max_frame_bytes)
            if memory is not None and self.reserved == 0 and size:
                if not memory.try_reserve(size):
                    self.blocked = True
                    break
                self.reserved = size
            body_start = self._start + 4
            have = self._end - body_start
            if have >= size:
                frames.append(shared[body_start : body_start + size])  # one copy, owned
                self._start = body_start + size
                self.reserved = 0
                continue
            if size > len(shared) - body_start and size > len(shared) // 2:
                # Receive the rest of this frame straight into its own buffer, grown as
                # its bytes arrive (a trusted peer's: whole, reused when free).
                big = (
                    self._whole_buffer(size)
                    if self.trusted
                    else bytearray(min(size, max(have, BIG_FRAME_FIRST_BYTES)))
                )
                with memoryview(shared) as received:  # copied once, then released
                    big[:have] = received[body_start : self._end]
                self._big, self._big_size, self._big_filled = big, size, have
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def _whole_buffer(self, size: int) -> bytearray:
        """A buffer of at least `size` bytes: the last big frame's when nothing else refers
        to it any more (a frame, a view or a decoded record set still in use holds a
        reference), else a new one."""
        spare = self._spare
        # References: the attribute, `spare`, getrefcount's argument.
        if spare is not None and len(spare) >= size and sys.getrefcount(spare) == 3:
            return spare
        buffer = bytearray(size)
        self._spare = buffer if size <= SPARE_MAX_BYTES else None
        return buffer

    def _compact(self) -> None:
        pending = self._end - self._start
        if self._start == 0 or len(self._shared) < self.buffer_bytes:
            # Full of one frame larger than the buffer but not yet known to be, or busy:
            # grow (to at most twice the frame announced, or to `buffer_bytes`).
            self._shared.extend(bytes(len(self._shared)))
            if self._start == 0:
                return
        self._shared[:pending] = self._shared[self._start : self._end]
        self._start, self._end = 0, pending
