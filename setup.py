"""The one compiled part of riverlog: the record walk (riverlog/protocol/records/_walk.c).

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler
is present the install still succeeds and `riverlog.protocol.records.walk` uses its
pure-Python twin (./dev installs gcc and the Python headers).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "riverlog.protocol.records._walk",
            sources=["src/riverlog/protocol/records/_walk.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        )
    ]
)
