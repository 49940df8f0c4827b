"""`riverlog dump-log`: Kafka's `kafka-dump-log.sh` (DumpLogSegments), same flags and output.

    riverlog dump-log --files 00000000000000000000.log[,....index,....timeindex,....snapshot]
                      [--print-data-log] [--deep-iteration] [--offsets-decoder]
                      [--index-sanity-check] [--verify-index-only] [--max-bytes N]
                      [--max-message-size N] [--skip-record-metadata]

Segment files (`.log`): one line per batch ("baseOffset: ... isvalid: true"), with
--deep-iteration (implied by --print-data-log and --offsets-decoder) one "| offset: ..." line
per record, the key and payload (UTF-8 text, as Kafka's StringDecoder) with
--print-data-log, `__consumer_offsets` records as JSON with --offsets-decoder. Offset and
time indexes (`.index`, `.timeindex`): their entries, checked against the log; with
--index-sanity-check only Kafka's start-up check. Transaction indexes (`.txnindex`): one line
per aborted transaction. Producer snapshots (`.snapshot`, riverlog's own JSON format): one
line per producer in Kafka's wording. Mismatches and bytes after the
last whole batch are reported as Kafka reports them. Reads files only; no broker needed.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from crc32c import crc32c

from riverlog.cli import offsets_decoder
from riverlog.protocol.exceptions import DecodeError
from riverlog.protocol.records.batch_header import (
    BATCH_HEADER_SIZE,
    CRC_COVERED_FROM,
    LOG_OVERHEAD,
    BatchHeader,
    read_batch_header,
)
from riverlog.protocol.records.compression import NAMES as CODEC_NAMES
from riverlog.protocol.records.v2 import CONTROL_ABORT, Record, control_record_type, decode_records

Parser = Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]]
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_INT32_MAX = 2**31 - 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--files",
        required=True,
        metavar="file1, file2, ...",
        help="REQUIRED: The comma separated list of data and index log files to be dumped.",
    )
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="If set, printing the messages content when dumping data logs. "
        "Automatically set if any decoder option is specified.",
    )
    parser.add_argument(
        "--deep-iteration",
        action="store_true",
        help="If set, uses deep instead of shallow iteration. Automatically set "
        "if print-data-log is enabled.",
    )
    parser.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="If set, log data will be parsed as offset data from the __consumer_offsets topic.",
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="If set, just verify the index log without printing its content.",
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="If set, just checks the index sanity without printing its "
        "content. This is the same check that is executed on broker startup "
        "to determine if an index needs rebuilding or not.",
    )
    parser.add_argument(
        "--max-message-size",
        type=int,
        default=5 * 1024 * 1024,
        metavar="size",
        help="Size of largest message. (default: 5242880)",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=_INT32_MAX,
        metavar="size",
        help="Limit the amount of total batches read in bytes avoiding reading "
        "the whole .log file(s). (default: 2147483647)",
    )
    parser.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="Whether to skip printing metadata for each record.",
    )


def _string_parser(
    offset: int, key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None]:
    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode("utf-8", errors="replace")

    return text(key), text(value)


def _batches(data: bytes) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every whole batch, stopping at the first that is not."""
    out = []
    pos = 0
    while len(data) - pos >= LOG_OVERHEAD:
        try:
            header = read_batch_header(data, pos)
        except DecodeError:
            break
        if pos + header.size > len(data):
            break
        out.append((pos, header))
        pos += header.size
    return out


def _last_sequence(h: BatchHeader) -> int:
    if h.base_sequence < 0:
        return -1
    return (h.base_sequence + h.last_offset_delta) % (_INT32_MAX + 1)


def batch_line(data: bytes, position: int, h: BatchHeader) -> str:
    valid = crc32c(memoryview(data)[position + CRC_COVERED_FROM : position + h.size]) == h.crc
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon else "OptionalLong.empty"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {_last_sequence(h)} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} deleteHorizonMs: {horizon} "
        f"position: {position} {_TIMESTAMP_TYPES[h.timestamp_type]}: {h.max_timestamp} "
        f"size: {h.size} magic: {h.magic} compresscodec: {CODEC_NAMES[h.compression]} "
        f"crc: {h.crc} isvalid: {str(valid).lower()}"
    )


def record_line(h: BatchHeader, r: Record, print_data: bool, parse: Parser, skip_meta: bool) -> str:
    parts = []
    prefix = "| "
    if not skip_meta:
        seq = (
            -1
            if h.base_sequence < 0
            else ((h.base_sequence + r.offset - h.base_offset) % (_INT32_MAX + 1))
        )
        key_size = -1 if r.key is None else len(r.key)
        value_size = -1 if r.value is None else len(r.value)
        parts.append(
            f"{prefix}offset: {r.offset} {_TIMESTAMP_TYPES[h.timestamp_type]}: "
            f"{r.timestamp} keySize: {key_size} valueSize: {value_size} sequence: "
            f"{seq} headerKeys: [{','.join(k for k, _ in r.headers)}]"
        )
        prefix = " "
        if h.is_control:
            kind = control_record_type(r)
            epoch = int.from_bytes((r.value or b"\0" * 6)[2:6], "big", signed=True)
            name = "ABORT" if kind == CONTROL_ABORT else "COMMIT"
            parts.append(f" endTxnMarker: {name} coordinatorEpoch: {epoch}")
    if print_data and not h.is_control:
        key, payload = parse(r.offset, r.key, r.value)
        if key is not None:
            parts.append(f"{prefix}key: {key}")
        if payload is not None:
            parts.append(f" payload: {payload}")
    return "".join(parts)


class Problems:
    """What Kafka's tool reports on stderr after all files: per file, pairs of numbers."""

    def __init__(self) -> None:
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}

    def report(self) -> None:
        err = sys.stderr
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index offset: {a}, log offset: {b}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index timestamp: {a}, log timestamp: {b}", file=err)
        for name, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index timestamp: {a}, Previously indexed timestamp: {b}", file=err)
        for pairs in self.time_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for a, b in pairs:
                print(f"Indexed offset: {a}, found log offset: {b}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for a, b in pairs:
                print(f"  {a} is followed by {b}", file=err)


def dump_log(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    print(f"Log starting offset: {int(path.name.split('.')[0])}")
    data = path.read_bytes()[: args.max_bytes]
    deep = args.deep_iteration or args.print_data_log or args.offsets_decoder
    print_data = args.print_data_log or args.offsets_decoder
    parse: Parser = offsets_decoder.parse if args.offsets_decoder else _string_parser
    valid_bytes = 0
    last = -1
    for position, h in _batches(data):
        print(batch_line(data, position, h))
        if deep:
            body = memoryview(data)[position + BATCH_HEADER_SIZE : position + h.size]
            for r in decode_records(h, body):
                if last != -1 and r.offset != last + 1:
                    problems.non_consecutive.setdefault(str(path.absolute()), []).insert(
                        0, (last, r.offset)
                    )
                last = r.offset
                print(record_line(h, r, print_data, parse, args.skip_record_metadata))
        valid_bytes += h.size
    trailing = len(data) - valid_bytes
    if trailing > 0 and args.max_bytes == _INT32_MAX:
        print(f"Found {trailing} invalid bytes at the end of {path.name}")


def _entries(path: Path, size: int) -> list[bytes]:
    """The index's entries; none for a missing file (riverlog writes an index only once its
    segment has `index.interval.bytes` of batches; Kafka would create an empty one)."""
    data = path.read_bytes() if path.exists() else b""
    return [data[i : i + size] for i in range(0, len(data) - size + 1, size)]


def _sanity(path: Path, last: int | None, width: int, what: str, base: int) -> None:
    """Kafka's start-up check: whole entries, the last entry not below the base offset."""
    size = path.stat().st_size if path.exists() else 0
    if size % width:
        raise ValueError(
            f"Index file {path.name} is corrupt, found {size} bytes which is "
            f"neither positive nor a multiple of {width}."
        )
    if last is not None and last < base:
        raise ValueError(
            f"Corrupt {what} found, {what} file ({path.absolute()}) has non-zero "
            f"size but the last offset is {last} which is less than the base "
            f"offset {base}."
        )


def dump_index(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    base = int(path.name.split(".")[0])
    entries = [
        (
            base + int.from_bytes(e[:4], "big", signed=True),
            int.from_bytes(e[4:8], "big", signed=True),
        )
        for e in _entries(path, 8)
    ]
    if not entries:
        print(f"{path} is empty.")
        return
    if args.index_sanity_check:
        _sanity(path, entries[-1][0], 8, "index", base)
        print(f"{path} passed sanity check.")
        return
    log = (path.parent / f"{path.name.split('.')[0]}.log").read_bytes()
    for i, (offset, position) in enumerate(entries):
        if offset == base and i > 0:
            return
        batches = _batches(log[position : position + args.max_message_size])
        first_last = batches[0][1].last_offset if batches else -1
        if first_last != offset:
            problems.index_mismatches.setdefault(str(path.absolute()), []).insert(
                0, (offset, first_last)
            )
        if not args.verify_index_only:
            print(f"offset: {offset} position: {position}")


def dump_time_index(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    base = int(path.name.split(".")[0])
    entries = [
        (
            int.from_bytes(e[:8], "big", signed=True),
            base + int.from_bytes(e[8:12], "big", signed=True),
        )
        for e in _entries(path, 12)
    ]
    if args.index_sanity_check:
        _sanity(path, entries[-1][1] if entries else None, 12, "time index", base)
        print(f"{path} passed sanity check.")
        return
    log = (path.parent / f"{path.name.split('.')[0]}.log").read_bytes()
    batches = _batches(log)
    name = str(path.absolute())
    previous = -1
    for i, (timestamp, offset) in enumerate(entries):
        if offset == base and i > 0:
            return
        found = next((h for _, h in batches if h.last_offset >= offset), None)
        if found is None or found.last_offset != offset:
            problems.time_not_found.setdefault(name, []).append(
                (offset, -1 if found is None else found.last_offset)
            )
        else:
            if found.max_timestamp != timestamp:
                problems.time_mismatches.setdefault(name, []).append(
                    (timestamp, found.max_timestamp)
                )
            if previous >= timestamp:
                problems.time_out_of_order.setdefault(name, []).append((timestamp, previous))
        if not args.verify_index_only:
            print(f"timestamp: {timestamp} offset: {offset}")
        previous = timestamp


def dump_txn_index(path: Path) -> None:
    """Kafka's line per aborted transaction of a `.txnindex` (its 34-byte entries)."""
    for entry in _entries(path, 34):
        version, pid, first, last, lso = struct.unpack(">hqqqq", entry)
        print(
            f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
            f"lastStableOffset: {lso}"
        )


def dump_producer_snapshot(path: Path) -> None:
    """riverlog's snapshot (JSON: producer id -> epoch, last timestamp, open transaction's
    first offset, coordinator epoch, retained batches) printed in Kafka's words."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        print(f"Snapshot {path} is corrupt: {e}", file=sys.stderr)
        return
    for pid, entry in state.items():
        txn_first = entry.get("txn_first_offset")
        txn_text = (
            "OptionalLong.empty"
            if txn_first is None or txn_first < 0
            else (f"OptionalLong[{txn_first}]")
        )
        line = (
            f"producerId: {pid} producerEpoch: {entry['epoch']} coordinatorEpoch: "
            f"{entry.get('coordinator_epoch', -1)} currentTxnFirstOffset: {txn_text} "
            f"lastTimestamp: {entry['last_timestamp']} "
        )
        if entry["batches"]:
            first_seq, last_seq, first_offset, last_offset, ts = entry["batches"][-1]
            line += (
                f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: "
                f"{last_offset} offsetDelta: {last_offset - first_offset} timestamp: {ts}"
            )
        print(line)


def run(args: argparse.Namespace) -> int:
    problems = Problems()
    for name in args.files.split(","):
        path = Path(name)
        print(f"Dumping {name}")
        suffix = os.path.splitext(path.name)[1]
        try:
            if suffix == ".log":
                dump_log(path, args, problems)
            elif suffix == ".index":
                dump_index(path, args, problems)
            elif suffix == ".timeindex":
                dump_time_index(path, args, problems)
            elif suffix == ".snapshot":
                dump_producer_snapshot(path)
            elif suffix == ".txnindex":
                dump_txn_index(path)
            else:
                print(f"Ignoring unknown file {name}", file=sys.stderr)
        except (OSError, ValueError, DecodeError) as e:
            print(f'Exception in thread "main" {type(e).__name__}: {e}', file=sys.stderr)
            return 1
    problems.report()
    return 0
