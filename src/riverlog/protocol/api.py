"""Base classes of the generated protocol messages.

Every message and nested structure in `riverlog.protocol.messages` is a slotted class holding
the union of its fields over all versions (plain classes, not dataclasses: hundreds of
dataclass decorations would cost ~0.4 s at import). A class carries one encoder and one
decoder per version in `_ENCODERS` / `_DECODERS` (versions whose layouts are identical share a
function); the methods here pick the right one and translate low-level failures into the
codec's exceptions in this one place.

Invariants: `decode(encode(m, v), v) == m` for every message `m` whose fields are
representable at version `v` (fields absent from `v` come back at their defaults);
`decode` consumes the whole buffer or raises `TrailingBytesError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, Self

from riverlog.protocol.exceptions import (
    EncodeError,
    TrailingBytesError,
    TruncatedError,
    UnsupportedVersionError,
)
from riverlog.protocol.primitives import Chunk, coalesce_chunks, join_chunks

Buffer = bytes | bytearray | memoryview
Encoder = Callable[[Any, list[Chunk]], None]
Decoder = Callable[[memoryview, int], tuple[Any, int]]


DEFAULT: Any = object()
"""Marks a constructor argument left out, where the default is a fresh list or struct."""


ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)
"""What an encoder raises for a field that does not fit its type; `write_to` (and
`framing.encode_response`, which calls the encoder itself) answers them as `EncodeError`."""


class Struct:
    """A (possibly nested) protocol structure with per-version encoders and decoders."""

    __slots__: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass with eq=True

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{self.NAME}({fields})"

    NAME: ClassVar[str] = ""
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int] = 1 << 15
    """The first version using compact encodings and tagged fields (1 << 15: none does)."""

    _ENCODERS: ClassVar[tuple[Encoder, ...]] = ()
    _DECODERS: ClassVar[tuple[Decoder, ...]] = ()

    @classmethod
    def _check_version(cls, version: int) -> None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnsupportedVersionError(cls.NAME, version, cls.MIN_VERSION, cls.MAX_VERSION)

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return version >= cls.FLEXIBLE_FROM

    def write_to(self, out: list[Chunk], version: int) -> None:
        """Append this structure's encoding at `version` to `out`."""
        self._check_version(version)
        try:
            self._ENCODERS[version](self, out)
        except ENCODE_ERRORS as e:
            raise EncodeError(f"cannot encode {self.NAME} v{version}: {e}") from e

    def encode(self, version: int) -> bytes:
        """The encoding at `version` as one buffer."""
        out: list[Chunk] = []
        self.write_to(out, version)
        return join_chunks(out)

    def encode_chunks(self, version: int) -> list[Chunk]:
        """The encoding at `version` as chunks: record data stays a separate chunk (a
        `FileRegion` or the caller's buffer) so it is never copied."""
        out: list[Chunk] = []
        self.write_to(out, version)
        return coalesce_chunks(out)

    @classmethod
    def read_from(cls, buf: memoryview, pos: int, version: int) -> tuple[Self, int]:
        """Decode one structure at `pos`; returns it and the position after it."""
        cls._check_version(version)
        try:
            result: Self
            result, end = cls._DECODERS[version](buf, pos)
        except struct.error as e:
            raise TruncatedError(f"{cls.NAME} v{version}: buffer ended inside a field") from e
        return result, end

    @classmethod
    def decode(cls, data: Buffer, version: int) -> Self:
        """Decode `data`, which must hold exactly one structure at `version`."""
        buf = data if isinstance(data, memoryview) else memoryview(data)
        result, end = cls.read_from(buf, 0, version)
        if end != len(buf):
            raise TrailingBytesError(
                f"{cls.NAME} v{version}: {len(buf) - end} bytes left after the message"
            )
        return result


class ApiMessage(Struct):
    """A top-level request or response body of one API key."""

    __slots__ = ()

    API_KEY: ClassVar[int] = -1
    IS_REQUEST: ClassVar[bool] = True
    SCHEMA_MIN_VERSION: ClassVar[int] = 0
    """The lowest version the upstream schema still lists (Kafka 4 dropped some old ones;
    riverlog implements them from v0 anyway, derived from the fields' version ranges)."""
