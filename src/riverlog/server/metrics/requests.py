"""Counters of the broker's work, incremented where the work happens and read only when
Prometheus scrapes.

Kept as plain Python numbers in lists indexed by API key and in one small slotted object per
topic, not as prometheus-client metric children: an increment is a list or attribute update
with no lock, no label lookup and no object made per request (a topic's counters are made
once, the first time it is seen).

Timing costs more than counting (two clock reads and a bucket search were most of the
metrics' cost per request, measured with callgrind: docs/field-notes.md), so requests are
timed per *read*, not one by one: the network layer calls `begin` when a read's frames are
about to be handled (one clock read) and `settle` once their answers are written (one more);
in between the dispatcher appends each answered request's API key to `answered`, counts an
`error_code` in the answer (`error`; `error_coded` says which answers have one), and for
Produce and Fetch the per-topic records (`count_records`). Every request of a
read thus gets that read's time, which is Kafka's TotalTimeMs for them (from the request
being read to its answer being sent, waiting behind the read's earlier requests included).
An answer that is awaited (a long poll, acks=all) is timed on its own by `done`.

`collect()` turns the counters into metric families with the names Kafka's JMX exporter
gives the same MBeans:

- `kafka_network_requestmetrics_requests_total{request}`: requests answered per type;
- `kafka_network_requestmetrics_errors_total{request,error}`: error codes in the answers
  (per partition for Produce and Fetch, the top-level `error_code` of others; a handler
  that failed counts as UNKNOWN_SERVER_ERROR);
- `kafka_network_requestmetrics_totaltimems{request}`: a histogram of the time from the
  request being read to its answer being ready, in milliseconds (long polls included, as
  Kafka's TotalTimeMs);
- `kafka_server_brokertopicmetrics_{messagesin,bytesin,bytesout,replicationbytesout}_total
  {topic}`: records and bytes appended by Produce, and record bytes sent to consumers and to
  follower replicas by Fetch. A Produce with acks=0 has no answer: its records count as in.

Invariant: every counter only grows; the collector reads them on the event loop thread, the
only thread that writes them. `answered` is empty outside a read's handling.
"""

from __future__ import annotations

import struct
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from riverlog.protocol import error_codes, messages
from riverlog.protocol.framing import Request
from riverlog.protocol.records.batch_header import MAGIC_POSITION

PRODUCE, FETCH = 0, 1
BUCKETS_MS = (
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)
_BUCKETS_S = tuple(b / 1000 for b in BUCKETS_MS)  # compared with perf_counter's seconds
_INT32 = struct.Struct(">i")
_now = time.perf_counter
_BATCH_LENGTH_AT, _RECORD_COUNT_AT, _LOG_OVERHEAD = 8, 57, 12


class TopicCounters:
    __slots__ = ("bytes_in", "bytes_out", "messages_in", "replication_bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0


def record_count(records: Any) -> int:
    """Records in a produce request's record set: the sum of its v2 batches' record counts;
    for a pre-0.11 message set (magic 0/1), its outer messages."""
    buf = records
    size = len(buf)
    pos = count = 0
    v2 = size > MAGIC_POSITION and buf[MAGIC_POSITION] >= 2
    while pos + _LOG_OVERHEAD <= size:
        length = _INT32.unpack_from(buf, pos + _BATCH_LENGTH_AT)[0]
        if v2:
            if pos + _RECORD_COUNT_AT + 4 > size:
                break
            count += _INT32.unpack_from(buf, pos + _RECORD_COUNT_AT)[0]
        else:
            count += 1
        pos += _LOG_OVERHEAD + max(length, 0)
    return count


def _size(records: Any) -> int:
    """Bytes of a fetch answer's records: bytes, a memoryview or a `FileRegion` (its len)."""
    return 0 if records is None else len(records)


class RequestMetrics:
    def __init__(self, api_names: Mapping[int, str], topic_name: Callable[[uuid.UUID], str]):
        """`api_names`: the request type names by API key (Produce, Fetch, ...);
        `topic_name`: a topic's name from its id (Fetch v13+ names topics by id)."""
        size = max(api_names, default=0) + 1
        self.api_names = dict(api_names)
        self.topic_name = topic_name
        self.seconds = [0.0] * size
        self.buckets = [[0] * (len(BUCKETS_MS) + 1) for _ in range(size)]
        self.errors: dict[tuple[int, int], int] = {}
        self.error_coded = [False] * size
        """Per API key: whether its answer has a top-level `error_code` to count."""
        for key, name in api_names.items():
            response_cls = getattr(messages, f"{name}Response", None)
            self.error_coded[key] = "error_code" in getattr(response_cls, "__slots__", ())
        self.topics: dict[str, TopicCounters] = {}
        self.started = 0.0
        """When the read being handled began (`begin`), in perf_counter seconds."""
        self.answered: list[int] = []
        """The API keys of the requests answered during the read being handled (their
        errors and records already counted), to be timed by `settle`."""

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def begin(self) -> None:
        """A read's frames are about to be dispatched."""
        self.started = _now()

    def settle(self) -> None:
        """The answers of the read begun last are written: time them (one clock read for all
        of them)."""
        answered = self.answered
        if not answered:
            return
        elapsed = _now() - self.started
        bucket = bisect_left(_BUCKETS_S, elapsed)
        buckets, seconds = self.buckets, self.seconds
        for key in answered:
            buckets[key][bucket] += 1
            seconds[key] += elapsed  # the count is the buckets' sum, taken at scrape time
        answered.clear()

    def error(self, api_key: int, code: int) -> None:
        key = (api_key, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def count_records(self, request: Request, response: Any) -> None:
        """A Produce or Fetch answered (`response` None: Produce with acks=0): its per-topic
        counts and error codes; its time is counted by `settle` or `done`."""
        if request.header.request_api_key == PRODUCE:
            self._produced(request.body, response)
        else:
            self._fetched(request.body, response)

    def done(self, request: Request, response: Any, started: float) -> None:
        """A request answered later than its read (an awaited answer), at once."""
        elapsed = _now() - started
        key = request.header.request_api_key
        self.seconds[key] += elapsed
        self.buckets[key][bisect_left(_BUCKETS_S, elapsed)] += 1
        if key <= FETCH:
            self.count_records(request, response)
        elif self.error_coded[key] and response is not None and response.error_code:
            self.error(key, response.error_code)

    def failed(self, request: Request, started: float) -> None:
        """A handler raised: the connection is closed without an answer (its records, if
        any, are not counted as in)."""
        elapsed = _now() - started
        key = request.header.request_api_key
        self.seconds[key] += elapsed
        self.buckets[key][bisect_left(_BUCKETS_S, elapsed)] += 1
        self.error(key, error_codes.UNKNOWN_SERVER_ERROR.code)

    def _produced(self, body: Any, response: Any) -> None:
        # The handler answers topics and partitions in the request's order; an answer that
        # does not line up (never expected) counts its partitions as appended.
        answers = response.responses if response is not None else ()
        for i, t in enumerate(body.topic_data):
            counters = self.topic(t.name)
            answer = answers[i] if i < len(answers) and answers[i].name == t.name else None
            outcomes = answer.partition_responses if answer is not None else ()
            for j, p in enumerate(t.partition_data):
                if j < len(outcomes) and outcomes[j].error_code:
                    self.error(PRODUCE, outcomes[j].error_code)
                elif p.records is not None:
                    counters.messages_in += record_count(p.records)
                    counters.bytes_in += len(p.records)

    def _fetched(self, body: Any, response: Any) -> None:
        if response is None:
            return
        follower = body.replica_id >= 0 or getattr(body.replica_state, "replica_id", -1) >= 0
        if response.error_code:
            self.error(FETCH, response.error_code)
        for t in response.responses:
            counters = self.topic(t.topic or self.topic_name(t.topic_id))
            for p in t.partitions:
                if p.error_code:
                    self.error(FETCH, p.error_code)
                elif p.records is not None:
                    if follower:
                        counters.replication_bytes_out += _size(p.records)
                    else:
                        counters.bytes_out += _size(p.records)

    # -- scrape --------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per request type",
            labels=["request"],
        )
        times = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from dispatch to the answer being ready (ms), per request type",
            labels=["request"],
        )
        for key, counts in enumerate(self.buckets):
            if not any(counts):
                continue
            name = self.api_names.get(key, str(key))
            cumulative, buckets = 0, []
            for bound, n in zip((*BUCKETS_MS, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append((_le(bound), cumulative))
            requests.add_metric([name], cumulative)
            times.add_metric([name], buckets, self.seconds[key] * 1000.0)
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in answers, per request type",
            labels=["request", "error"],
        )
        for (key, code), count in sorted(self.errors.items()):
            errors.add_metric([self.api_names.get(key, str(key)), _error_name(code)], count)
        yield requests
        yield errors
        yield times
        yield from self._topic_families()

    def _topic_families(self) -> Iterator[Metric]:
        for field, name, doc in (
            ("messages_in", "messagesin", "Records appended by Produce"),
            ("bytes_in", "bytesin", "Record bytes appended by Produce"),
            ("bytes_out", "bytesout", "Record bytes sent to consumers"),
            ("replication_bytes_out", "replicationbytesout", "Record bytes sent to followers"),
        ):
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"]
            )
            for topic, counters in sorted(self.topics.items()):
                family.add_metric([topic], getattr(counters, field))
            yield family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _error_name(code: int) -> str:
    return error_codes.for_code(code).name
