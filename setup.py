"""riverlog's compiled parts: the record walk (riverlog/protocol/records/_walk.c), the
protocol's hottest primitive readers (riverlog/protocol/_prim.c), plain Produce requests and
answers whole (riverlog/protocol/_produce.c) and the TLS read loop
(riverlog/server/_tls_drain.c).

Everything else is declared in pyproject.toml. The extensions are optional: where no C
compiler is present the install still succeeds; `riverlog.protocol.records.walk` then uses
its pure-Python twin, `riverlog.protocol.primitives` its Python readers and writers,
`riverlog.protocol.framing` the generated Produce codec, and TLS connections asyncio's own
read loop (`server/tls_read.py`).
./dev installs gcc and the Python headers.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "riverlog.protocol.records._walk",
            sources=["src/riverlog/protocol/records/_walk.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "riverlog.protocol._produce",
            sources=["src/riverlog/protocol/_produce.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "riverlog.protocol._prim",
            sources=["src/riverlog/protocol/_prim.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(  # no OpenSSL headers or link: server/tls_read.py hands it _ssl's functions
            "riverlog.server._tls_drain",
            sources=["src/riverlog/server/_tls_drain.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ]
)
