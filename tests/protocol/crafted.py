"""Crafted record batches for validation tests: well-formed headers with a correct CRC around
bad contents (garbage compressed payloads, unknown codecs, lying counts, bombs, null keys).

Every function returns a whole v2 batch whose CRC matches its bytes, so only the checks
behind the CRC can refuse it.
"""

from __future__ import annotations

import functools
import struct
import time

from crc32c import crc32c

from riverlog.protocol.records import compression
from riverlog.protocol.records.v2 import Record, assemble_batch, encode_batch, encode_record

_ATTRIBUTES = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def fix_crc(batch: bytes | bytearray) -> bytes:
    data = bytearray(batch)
    data[17:21] = struct.pack(">I", crc32c(bytes(data[21:])))
    return bytes(data)


def good(n: int = 3, *, key: bytes | None = b"k", ts: int | None = None, codec: int = 0) -> bytes:
    stamp = now_ms() if ts is None else ts
    return encode_batch(
        [Record(i, stamp, key, b"value-%d" % i) for i in range(n)], compression_type=codec
    )


def with_payload(codec: int, payload: bytes, count: int = 1) -> bytes:
    """A batch of `count` records whose (compressed) body is exactly `payload`."""
    stamp = now_ms()
    raw = bytearray(
        assemble_batch(
            payload,
            count,
            base_offset=0,
            base_timestamp=stamp,
            max_timestamp=stamp,
            last_offset_delta=count - 1,
        )
    )
    (attributes,) = _ATTRIBUTES.unpack_from(raw, 21)
    _ATTRIBUTES.pack_into(raw, 21, (attributes & ~0x07) | codec)
    return fix_crc(raw)


def garbage(codec: int) -> bytes:
    """A batch with codec `codec` whose payload does not decompress."""
    head = {compression.LZ4: b"\x04\x22\x4d\x18", compression.ZSTD: b"\x28\xb5\x2f\xfd"}
    return with_payload(codec, head.get(codec, b"") + b"\x13\x37 not compressed at all" * 4)


def unknown_codec(codec: int) -> bytes:
    return with_payload(codec, encode_record(0, 0, b"k", b"v"))


def lying_count(count: int) -> bytes:
    """Three real records, the header claiming `count` (and a matching last offset delta)."""
    raw = bytearray(good(3))
    _INT32.pack_into(raw, 23, count - 1)
    _INT32.pack_into(raw, 57, count)
    return fix_crc(raw)


@functools.lru_cache(maxsize=8)
def bomb(codec: int = compression.ZSTD, expanded: int = 80 * 1024 * 1024) -> bytes:
    """One record whose value is `expanded` zero bytes, compressed: a decompression bomb."""
    record = encode_record(0, 0, b"k", bytes(expanded))
    return with_payload(codec, compression.compress(codec, record))


def records(keys: list[bytes | None], *, ts: int | None = None, codec: int = 0) -> bytes:
    stamp = now_ms() if ts is None else ts
    return encode_batch(
        [Record(i, stamp, k, b"v%d" % i) for i, k in enumerate(keys)], compression_type=codec
    )
