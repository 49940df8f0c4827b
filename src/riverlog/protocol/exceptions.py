"""Exceptions raised by the sans-I/O protocol codec.

Every failure to decode bytes that came off the wire raises a subclass of `ProtocolError`; no
`IndexError`, `struct.error` or `UnicodeDecodeError` escapes the codec. The broker maps these
to one of two reactions: answer with a Kafka error code (the request was framed and its header
was readable), or close that one connection (the frame itself cannot be trusted).

    ProtocolError
      DecodeError                  bytes that do not follow the encoding
        TruncatedError             the buffer ended before the field did
        NegativeLengthError        a size/length that may not be negative was
        InvalidVarintError         a varint longer than its type allows
        InvalidStringError         string bytes that are not UTF-8
        TrailingBytesError         bytes left over after a complete message
      FrameError                   the 4-byte size prefix is unusable
        FrameTooLargeError         larger than the configured maximum
      UnknownApiKeyError           the header names an API key we do not know
      UnsupportedVersionError      a known API at a version we do not implement
      CorruptRecordError           record data that fails its CRC or layout checks
        UnsupportedCompressionError  an unknown compression codec id
      EncodeError                  a value that cannot be written at that version
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every error the codec raises."""


class DecodeError(ProtocolError):
    """The bytes do not follow the Kafka encoding."""


class TruncatedError(DecodeError):
    """The buffer ended before a field was complete."""


class NegativeLengthError(DecodeError):
    """A length prefix was negative where null is not allowed (or below -1)."""


class InvalidVarintError(DecodeError):
    """A varint ran longer than the largest value of its type."""


class InvalidStringError(DecodeError):
    """String bytes were not valid UTF-8."""


class TrailingBytesError(DecodeError):
    """A message decoded completely but bytes were left over."""


class FrameError(ProtocolError):
    """The frame size prefix is negative or otherwise unusable."""


class FrameTooLargeError(FrameError):
    """A frame's declared size is larger than the configured maximum."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class UnknownApiKeyError(ProtocolError):
    """The request header names an API key that no message class implements."""

    def __init__(self, api_key: int, correlation_id: int | None = None) -> None:
        super().__init__(f"unknown API key {api_key}")
        self.api_key = api_key
        self.correlation_id = correlation_id


class UnsupportedVersionError(ProtocolError):
    """A known API was asked for at a version outside the implemented range."""

    def __init__(
        self,
        name: str,
        version: int,
        min_version: int,
        max_version: int,
        *,
        api_key: int | None = None,
        correlation_id: int | None = None,
    ) -> None:
        super().__init__(
            f"{name} version {version} is not supported (supported: {min_version}-{max_version})"
        )
        self.name = name
        self.version = version
        self.min_version = min_version
        self.max_version = max_version
        self.api_key = api_key
        self.correlation_id = correlation_id


class CorruptRecordError(ProtocolError):
    """Record data failed its CRC, magic or layout checks."""


class UnsupportedCompressionError(CorruptRecordError):
    """The attributes name a compression codec that does not exist."""


class EncodeError(ProtocolError):
    """A value cannot be encoded at the requested version (out of range, or not representable)."""
