"""TLS 1.3 cipher suites on a stdlib `ssl.SSLContext`, which Python 3.11 cannot restrict.

`ssl.SSLContext.set_ciphers` sets OpenSSL's TLS 1.2 cipher list only; TLS 1.3 suites are set
by `SSL_CTX_set_ciphersuites`, which Python 3.11's `ssl` does not expose. Kafka's
`ssl.cipher.suites` names TLS 1.3 suites too, so `set_tls13_suites` calls that OpenSSL
function on the context's own `SSL_CTX`:

- the function is looked up through the `_ssl` extension module's handle (`dlsym` searches
  its dependencies), so it is the very libssl that `ssl` uses, and that library's version
  must be the one `ssl.OPENSSL_VERSION_NUMBER` reports;
- the `SSL_CTX *` is the first field after the object header of CPython's `PySSLContext`
  (unchanged since Python 2.7), read only on CPython, and checked against the context
  first: the options OpenSSL reports for it must be `ctx.options`;
- afterwards the TLS 1.3 suites `ctx.get_ciphers()` lists must be exactly those asked, in
  that order (with the server's preference, `OP_CIPHER_SERVER_PREFERENCE`, set by Python
  for server contexts, the order is the order of preference).

Anything that does not hold raises `SecurityConfigError`: a setting that cannot be honoured
stops start-up (fail closed), it is never silently widened.
"""

from __future__ import annotations

import ctypes
import functools
import ssl
import sys

from riverlog.security.errors import SecurityConfigError

TLS13_SUITES = (
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
)
"""The TLS 1.3 suites (RFC 8446), spelt as Kafka and OpenSSL both spell them."""


def is_tls13_suite(name: str) -> bool:
    return name in TLS13_SUITES


class _LibSsl:
    def __init__(self, handle: ctypes.CDLL) -> None:
        self.set_ciphersuites = handle.SSL_CTX_set_ciphersuites
        self.set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.set_ciphersuites.restype = ctypes.c_int
        self.get_options = handle.SSL_CTX_get_options
        self.get_options.argtypes = [ctypes.c_void_p]
        self.get_options.restype = ctypes.c_uint64


@functools.cache
def _libssl() -> _LibSsl | str:
    """The libssl `ssl` runs on, or why it cannot be used."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    try:
        import _ssl

        handle = ctypes.CDLL(_ssl.__file__)
        version = handle.OpenSSL_version_num
        version.restype = ctypes.c_ulong
        if version() != ssl.OPENSSL_VERSION_NUMBER:
            return "the libssl found is not the one Python's ssl module uses"
        return _LibSsl(handle)
    except (OSError, AttributeError) as e:
        return f"OpenSSL's SSL_CTX_set_ciphersuites is not reachable: {e}"


def _ssl_ctx(ctx: ssl.SSLContext, lib: _LibSsl) -> int:
    address = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not address or lib.get_options(address) != int(ctx.options):
        raise SecurityConfigError(
            "ssl.cipher.suites: cannot reach OpenSSL's context to set TLS 1.3 suites"
        )
    return address


def tls13_suites(ctx: ssl.SSLContext) -> list[str]:
    """The TLS 1.3 suites `ctx` may negotiate, in its order."""
    return [c["name"] for c in ctx.get_ciphers() if c.get("protocol") == "TLSv1.3"]


def set_tls13_suites(ctx: ssl.SSLContext, names: list[str]) -> None:
    """Enable exactly `names` (TLS 1.3 suites, in order of preference) for TLS 1.3 on `ctx`;
    an empty list leaves TLS 1.3 no suite (so it cannot be negotiated)."""
    unknown = [n for n in names if not is_tls13_suite(n)]
    if unknown:
        raise SecurityConfigError(f"ssl.cipher.suites: {', '.join(unknown)} not TLS 1.3 suites")
    if tls13_suites(ctx) == names:
        return  # already so: nothing to reach for
    lib = _libssl()
    if isinstance(lib, str):
        raise SecurityConfigError(f"ssl.cipher.suites: cannot restrict TLS 1.3 suites: {lib}")
    if lib.set_ciphersuites(_ssl_ctx(ctx, lib), ":".join(names).encode()) != 1:
        raise SecurityConfigError(f"ssl.cipher.suites: OpenSSL refused {', '.join(names)}")
    if tls13_suites(ctx) != names:
        raise SecurityConfigError(
            f"ssl.cipher.suites: TLS 1.3 suites are {tls13_suites(ctx)} after setting {names}"
        )
