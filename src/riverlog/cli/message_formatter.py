"""Kafka 3.9's `DefaultMessageFormatter` for `console-consumer --formatter`.

Properties (from `--property`, over `--formatter-config`): `print.timestamp`, `print.key`,
`print.offset`, `print.partition`, `print.headers`, `print.value` (default only value),
`key.separator` (tab), `line.separator` (newline), `headers.separator` (","), `null.literal`
("null"), and `key.deserializer` / `value.deserializer` / `headers.deserializer` naming one
of Kafka's deserializer classes below. Columns are written in Kafka's order (timestamp,
partition, offset, headers, key, value), each followed by the key separator when another
column follows and by the line separator after the last one, exactly as Kafka writes them.

The formatter names Kafka accepts for it (`kafka.tools.DefaultMessageFormatter`, deprecated,
and `org.apache.kafka.tools.consumer.DefaultMessageFormatter`) are the only ones taken; any
other class — or deserializer — is refused rather than replaced by something else.
Pure: records in, bytes out.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from riverlog.client.consumer import ConsumerRecord

FORMATTERS = (
    "kafka.tools.DefaultMessageFormatter",
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
)
_SERDE = "org.apache.kafka.common.serialization."


def _number(fmt: str) -> Callable[[bytes], str]:
    size = struct.calcsize(fmt)

    def decode(data: bytes) -> str:
        if len(data) != size:
            raise ValueError(f"Size of data received by {fmt} deserializer is not {size}")
        value = struct.unpack(fmt, data)[0]
        return repr(value) if isinstance(value, float) else str(value)

    return decode


DESERIALIZERS: dict[str, Callable[[bytes], str]] = {
    _SERDE + "StringDeserializer": lambda b: b.decode("utf-8", errors="replace"),
    _SERDE + "LongDeserializer": _number(">q"),
    _SERDE + "IntegerDeserializer": _number(">i"),
    _SERDE + "ShortDeserializer": _number(">h"),
    _SERDE + "DoubleDeserializer": _number(">d"),
    _SERDE + "FloatDeserializer": _number(">f"),
    _SERDE + "UUIDDeserializer": lambda b: str(uuid.UUID(b.decode())),
}


def _flag(props: Mapping[str, str], key: str, default: bool) -> bool:
    return props[key].strip().lower() == "true" if key in props else default


def _deserializer(props: Mapping[str, str], key: str) -> Callable[[bytes], str] | None:
    name = props.get(key)
    if name is None:
        return None
    if name not in DESERIALIZERS:
        raise ValueError(
            f"{key} {name} is not one riverlog's console consumer can use "
            f"(one of: {', '.join(sorted(DESERIALIZERS))})"
        )
    return DESERIALIZERS[name]


@dataclass(frozen=True)
class DefaultMessageFormatter:
    print_timestamp: bool
    print_key: bool
    print_value: bool
    print_partition: bool
    print_offset: bool
    print_headers: bool
    key_separator: bytes
    line_separator: bytes
    headers_separator: bytes
    null_literal: bytes
    key_deserializer: Callable[[bytes], str] | None
    value_deserializer: Callable[[bytes], str] | None
    headers_deserializer: Callable[[bytes], str] | None

    @classmethod
    def configure(cls, props: Mapping[str, str]) -> DefaultMessageFormatter:
        def text(key: str, default: str) -> bytes:
            return props.get(key, default).encode()

        return cls(
            print_timestamp=_flag(props, "print.timestamp", False),
            print_key=_flag(props, "print.key", False),
            print_value=_flag(props, "print.value", True),
            print_partition=_flag(props, "print.partition", False),
            print_offset=_flag(props, "print.offset", False),
            print_headers=_flag(props, "print.headers", False),
            key_separator=text("key.separator", "\t"),
            line_separator=text("line.separator", "\n"),
            headers_separator=text("headers.separator", ","),
            null_literal=text("null.literal", "null"),
            key_deserializer=_deserializer(props, "key.deserializer"),
            value_deserializer=_deserializer(props, "value.deserializer"),
            headers_deserializer=_deserializer(props, "headers.deserializer"),
        )

    def _bytes(self, data: bytes | None, deserializer: Callable[[bytes], str] | None) -> bytes:
        raw = self.null_literal if data is None else data
        return raw if deserializer is None else deserializer(raw).encode()

    def format(self, r: ConsumerRecord) -> bytes:
        columns: list[bytes] = []
        if self.print_timestamp:
            kind = "LogAppendTime" if r.timestamp_type else "CreateTime"
            columns.append(
                f"{kind}:{r.timestamp}".encode() if r.timestamp >= 0 else b"NO_TIMESTAMP"
            )
        if self.print_partition:
            columns.append(f"Partition:{r.partition}".encode())
        if self.print_offset:
            columns.append(f"Offset:{r.offset}".encode())
        if self.print_headers:
            columns.append(
                self.headers_separator.join(
                    k.encode() + b":" + self._bytes(v, self.headers_deserializer)
                    for k, v in r.headers
                )
                or b"NO_HEADERS"
            )
        if self.print_key:
            columns.append(self._bytes(r.key, self.key_deserializer))
        if self.print_value:
            columns.append(self._bytes(r.value, self.value_deserializer))
        if not columns:
            return b""
        return self.key_separator.join(columns) + self.line_separator
