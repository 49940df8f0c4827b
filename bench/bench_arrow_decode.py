"""Arrow decode benchmark: fetched v2 batches to one `pyarrow.RecordBatch` (prints numbers,
asserts none).

Compares `riverlog.client.arrow.batches_to_arrow` with the pure-Python way: `decode_records`
per batch, then `pa.array` of Python lists per column. 200 batches of 500 records, 16-byte
keys, 100-byte and 1 KiB values, uncompressed and lz4. MB/s counts key and value bytes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

import pyarrow as pa

from riverlog.client.arrow import SCHEMA, batches_to_arrow
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import BATCH_HEADER_SIZE, read_batch_header
from riverlog.protocol.records.v2 import Record, decode_records, encode_batch

BATCHES = 200
RECORDS = 500
KEY_SIZE = 16


def _batches(value_size: int, codec: int) -> list[bytes]:
    out = []
    timestamp = 1_700_000_000_000
    for b in range(BATCHES):
        base = b * RECORDS
        records = [
            Record(base + i, timestamp + base + i, os.urandom(KEY_SIZE), os.urandom(value_size))
            for i in range(RECORDS)
        ]
        out.append(encode_batch(records, base_offset=base, compression_type=codec))
    return out


def _baseline(topic: str, partition: int, batches: Sequence[bytes]) -> pa.RecordBatch:
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    headers: list[list[dict[str, object]]] = []
    for raw in batches:
        header = read_batch_header(raw)
        for r in decode_records(header, memoryview(raw)[BATCH_HEADER_SIZE:]):
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            timestamps.append(r.timestamp)
            types.append(header.timestamp_type)
            headers.append([{"key": k, "value": v} for k, v in r.headers])
    n = len(offsets)
    columns = [keys, values, [topic] * n, [partition] * n, offsets, timestamps, types, headers]
    arrays = [pa.array(c, f.type) for c, f in zip(columns, SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def _best_seconds(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    records = BATCHES * RECORDS
    print(f"{BATCHES} batches x {RECORDS} records, {KEY_SIZE}-byte keys")
    print(f"best of {repeat} runs (baseline: of 3); MB/s counts key and value bytes")
    print(f"{'case':<22}{'path':<10}{'ms':>9}{'Mrec/s':>9}{'MB/s':>9}{'speedup':>9}  same result")
    for value_size in (100, 1024):
        for codec in (compression.NONE, compression.LZ4):
            batches = _batches(value_size, codec)
            payload = records * (KEY_SIZE + value_size)
            case = f"{value_size} B values, {compression.NAMES[codec]}"
            seconds = {
                "arrow": _best_seconds(lambda b=batches: batches_to_arrow("bench", 0, b), repeat),
                "baseline": _best_seconds(lambda b=batches: _baseline("bench", 0, b), 3),
            }
            same = batches_to_arrow("bench", 0, batches).equals(_baseline("bench", 0, batches))
            for path, s in seconds.items():
                print(
                    f"{case:<22}{path:<10}{s * 1e3:>9.1f}{records / s / 1e6:>9.2f}"
                    f"{payload / s / 1e6:>9.0f}{seconds['baseline'] / s:>8.1f}x  {same}"
                )


if __name__ == "__main__":
    main()
