"""How the tools word errors and long waits, as Kafka 3.9's tools do.

Kafka's tools print a failed admin future's message, which reads
`org.apache.kafka.common.errors.<Name>Exception: <message>`; `exception_text` words a
`KafkaError` that way so that what users grep for in Kafka's output is found in ours.
`Waiter` prints one line to stderr the first time a tool has to wait for something (a leader,
an unreachable broker) and says what, so a long wait is never silent.
"""

from __future__ import annotations

import sys

from riverlog.protocol.error_codes import KafkaError

_JAVA_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UnknownServerException",
    "CORRUPT_MESSAGE": "CorruptRecordException",
    "REQUEST_TIMED_OUT": "TimeoutException",
    "NETWORK_EXCEPTION": "NetworkException",
}


def exception_name(e: KafkaError) -> str:
    """Kafka's exception class for the error (OFFSET_OUT_OF_RANGE: OffsetOutOfRangeException)."""
    name = e.error.name
    if name in _JAVA_NAMES:
        return _JAVA_NAMES[name]
    return "".join(part.capitalize() for part in name.split("_")) + "Exception"


def exception_text(e: KafkaError) -> str:
    return f"org.apache.kafka.common.errors.{exception_name(e)}: {e.message}"


class Waiter:
    """Says once, on stderr, what a tool is waiting for."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def waiting_for(self, what: str) -> None:
        if what not in self._said:
            self._said.add(what)
            print(f"Waiting for {what} ...", file=sys.stderr, flush=True)
