"""Reading TLS connections with the compiled drain (`_tls_drain.c`) instead of asyncio's
per-record Python loop, where it is available and checked; asyncio's own loop otherwise.

Why: OpenSSL hands out one TLS record per `SSL_read`, and asyncio's `SSLProtocol` (3.11)
makes one Python-level `SSLObject.read` call per record. librdkafka writes ~2 KiB records,
so a 1 MB Produce request costs ~500 trips through Python. Measured on librdkafka produce of
1 KiB records (docs/field-notes.md): broker CPU 2.63 → 2.24 s/GB with the drain.

`install(transport)` gives one TLS transport's `SSLProtocol` a `_do_read__buffered` that
fills the app's buffer with `_tls_drain.drain` (same contract as asyncio's: fill what
`get_buffer` gave, hand it over with `buffer_updated`, close_notify ends the stream, a full
buffer schedules another read). Anything but "want more input" or close_notify goes back to
asyncio's own method, so OpenSSL's errors surface exactly as asyncio raises them.

It reaches into private parts, so it checks them first (`available()`), once per process:
CPython before 3.14 (whose `PySSLSocket` starts with the weak socket reference and the
`SSL *`), asyncio's `SSLProtocol` attributes it uses, OpenSSL's functions found through
`_ssl`'s own library, and — on a real in-memory connection — that the `SSL *` read from an
`SSLObject` belongs to that object's context (`SSL_get_SSL_CTX`). Any check failing, or
`ENABLED` set False (tests run both ways), leaves asyncio's loop in place.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import ssl
import sys
import types
from typing import Any

log = logging.getLogger(__name__)

ENABLED = True
"""False: every connection keeps asyncio's own read loop (the pure-Python path)."""

_WANT_READ, _CLOSED = 1, 2
_ASYNCIO_METHODS = (
    "_do_read__buffered",
    "_get_read_buffer_size",
    "_call_eof_received",
    "_start_shutdown",
)
_ASYNCIO_FIELDS = ("_sslobj", "_app_protocol_get_buffer", "_app_protocol_buffer_updated", "_loop")


@functools.cache
def _drain_module() -> Any:
    """The compiled drain, initialised and checked; None where it cannot be used."""
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 14):
        return None
    try:
        import _ssl
        from asyncio import sslproto

        from riverlog.server import _tls_drain  # type: ignore[attr-defined]
    except ImportError:
        return None
    if not all(hasattr(sslproto.SSLProtocol, name) for name in _ASYNCIO_METHODS):
        return None
    try:
        lib = ctypes.CDLL(_ssl.__file__)  # the libssl `_ssl` itself uses
        _tls_drain.init(
            ctypes.cast(lib.SSL_read_ex, ctypes.c_void_p).value,
            ctypes.cast(lib.SSL_get_error, ctypes.c_void_p).value,
        )
        get_ctx = lib.SSL_get_SSL_CTX
        get_ctx.argtypes, get_ctx.restype = [ctypes.c_void_p], ctypes.c_void_p
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        sslobj = context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
        ctx_pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
        ssl_pointer = _tls_drain.ssl_pointer(sslobj._sslobj)  # type: ignore[attr-defined]
        if not ssl_pointer or get_ctx(ssl_pointer) != ctx_pointer:
            return None
    except (OSError, AttributeError, ValueError) as e:
        log.info("TLS reads stay on asyncio's loop: %s", e)
        return None
    return _tls_drain


def available() -> bool:
    return ENABLED and _drain_module() is not None


def install(transport: asyncio.BaseTransport) -> bool:
    """Read `transport` (asyncio's TLS transport) with the drain; whether it was installed."""
    protocol = getattr(transport, "_ssl_protocol", None)
    if protocol is None or not available():
        return False
    if not all(hasattr(protocol, name) for name in _ASYNCIO_FIELDS):
        return False
    if getattr(protocol._sslobj, "_sslobj", None) is None:
        return False
    protocol._do_read__buffered = types.MethodType(_do_read__buffered, protocol)
    return True


def _do_read__buffered(self: Any) -> None:
    """asyncio's `SSLProtocol._do_read__buffered`, with the records drained in C."""
    buffer = self._app_protocol_get_buffer(self._get_read_buffer_size())
    wants = len(buffer)
    if not wants:  # nothing to fill: asyncio's own method decides
        del buffer
        type(self)._do_read__buffered(self)
        return
    count, status = _drain_module().drain(self._sslobj._sslobj, buffer)
    del buffer  # the app may grow the memory it lent once it has been told
    if count > 0:
        self._app_protocol_buffer_updated(count)
    if status == _CLOSED:
        self._call_eof_received()
        self._start_shutdown()
    elif status == _WANT_READ:
        return
    elif count == wants:
        self._loop.call_soon(self._do_read)
    else:  # an error (or an OpenSSL state asyncio knows better): asyncio's own read
        type(self)._do_read__buffered(self)
