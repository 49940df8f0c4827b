"""The compiled primitive readers and writers (`protocol/_prim.c`) answer exactly as their
pure-Python twins in `protocol/primitives.py`: the same value and position, or the same
exception with the same message, for arbitrary bytes at any position. Where a C compiler
exists (CI, every dev machine), the extension must have been built.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.protocol import framing, primitives
from riverlog.protocol.messages import ProduceRequest, ProduceResponse
from tests.protocol import crafted
from tests.protocol.schema_strategies import cases, message_strategy

COMPILED = primitives.COMPILED
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="protocol/_prim.c not built")
needs_produce = pytest.mark.skipif(
    framing.FAST_PRODUCE is None, reason="protocol/_produce.c not built, or RIVERLOG_PURE_PYTHON"
)
READERS = [name for name in primitives.ACCELERATED if name.startswith("read_")]


def test_the_compiled_primitives_are_built_where_a_compiler_exists() -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler here: the Python primitives serve")
    assert COMPILED is not None, "pip install -e . did not build protocol/_prim.c"
    from riverlog.protocol import _produce  # type: ignore[attr-defined]  # noqa: F401

    if not os.environ.get("RIVERLOG_PURE_PYTHON"):
        assert primitives.read_compact_string is COMPILED["read_compact_string"]
        assert framing.FAST_PRODUCE is not None and framing.FAST_PRODUCE_ANSWER is not None


def _outcome(function: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    try:
        result = function(*args)
    except Exception as e:
        return ("raised", type(e), str(e))
    if isinstance(result, tuple):  # a reader: (value, pos); slices compared by content
        value, pos = result
        if isinstance(value, memoryview):
            return ("slice", value.tobytes(), pos)
        return (type(value), value, pos)
    return (type(result), result)


def _same(name: str, *args: Any) -> None:
    assert COMPILED is not None
    python = _outcome(primitives.PYTHON[name], *args)
    compiled = _outcome(COMPILED[name], *args)
    assert compiled == python, (name, args)


def _prefixed(body: bytes) -> st.SearchStrategy[bytes]:
    """`body` behind each kind of length prefix, declared right, short, long or negative."""
    n = st.sampled_from([len(body), len(body) + 1, len(body) - 1, 0, -1, -2, 0x7F, 0x80])
    return n.flatmap(
        lambda k: st.sampled_from(
            [
                struct.pack(">h", max(-0x8000, min(0x7FFF, k))) + body,
                struct.pack(">i", k) + body,
                bytes([(k + 1) & 0xFF]) + body,
                bytes([((k + 1) & 0x7F) | 0x80, 0x01]) + body,
            ]
        )
    )


_TEXT = st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass"))
_BYTES = st.one_of(
    st.binary(max_size=300), _TEXT.flatmap(_prefixed), st.binary().flatmap(_prefixed)
)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(data=_BYTES, pad=st.binary(max_size=3), pos=st.integers(-2, 8))
def test_readers_agree_on_any_bytes(data: bytes, pad: bytes, pos: int) -> None:
    buf = pad + data
    at = len(pad) if pos == 0 else pos
    for name in READERS:
        _same(name, memoryview(buf), at)
        _same(name, buf, at)
        _same(name, memoryview(bytearray(buf)), at)


@needs_compiled
def test_readers_agree_on_unusual_buffers() -> None:
    """Views the fast path does not take (other formats, released, strided) go to Python."""
    raw = b"\x03ab\x00\x00\x00\x02xy" * 4
    released = memoryview(raw)
    released.release()
    views: list[Any] = [memoryview(raw).cast("b"), memoryview(raw)[::2], released, None, 3]
    for name in READERS:
        for view in views:
            for pos in (0, 1, True, 2**70):
                _same(name, view, pos)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.text(max_size=200),
        st.none(),
        st.integers(),
        st.binary(max_size=5),
        st.lists(st.integers(), max_size=200),
        st.tuples(st.integers()),
    ),
    nullable=st.booleans(),
)
def test_writers_agree(value: Any, nullable: bool) -> None:
    _same("write_compact_string", value)
    _same("write_compact_nullable_string", value)
    _same("write_compact_array_length", value, nullable)
    _same("write_compact_array_length", value)  # a wrong call fails alike


@needs_compiled
def test_writers_agree_on_surrogates_and_subclasses() -> None:
    class Text(str):
        pass

    for value in ["\ud800", Text("abc"), "é" * 63, "é" * 64, "x" * 126, "x" * 127]:
        _same("write_compact_string", value)
        _same("write_compact_nullable_string", value)


PRODUCE_CASES = [(m, v) for (m, v) in cases() if m.name == "ProduceRequest" and 3 <= v <= 12]


def _decoded(frame: bytes, fast: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    monkeypatch.setattr(framing, "FAST_PRODUCE", fast)
    try:
        request = framing.decode_request(bytearray(frame))
    except Exception as e:
        return ("raised", type(e), str(e))
    return ("decoded", request)


def _untagged(request: Any) -> bool:
    return not request.unknown_tagged_fields and all(
        not t.unknown_tagged_fields and all(not p.unknown_tagged_fields for p in t.partition_data)
        for t in request.topic_data
    )


@needs_produce
@pytest.mark.parametrize("case", PRODUCE_CASES, ids=[f"v{v}" for _, v in PRODUCE_CASES])
def test_compiled_produce_decoding_agrees_with_the_generated_decoders(
    case: tuple[Any, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any Produce request (v3-v12), whole, cut short or with bytes changed: the compiled
    decode (`_prim.decode_produce`, where it answers) builds what the generated decoders
    build, and a request it leaves to them is answered by them alike."""
    msg, version = case
    fast = framing.FAST_PRODUCE
    assert fast is not None

    @settings(max_examples=25, deadline=None, database=None)
    @given(message_strategy(msg, version), st.data())
    def check(instance: Any, data: st.DataObject) -> None:
        frame = bytearray(framing.encode_request(instance, version, 7, "c")[4:])
        whole = _decoded(bytes(frame), fast, monkeypatch)
        assert whole == _decoded(bytes(frame), None, monkeypatch)
        if _untagged(instance):  # the plain shape: C answers it
            assert fast(memoryview(frame), version) is not None
        for _ in range(data.draw(st.integers(0, 3))):
            frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(frame)))
        damaged = bytes(frame[:cut])
        assert _decoded(damaged, fast, monkeypatch) == _decoded(damaged, None, monkeypatch)

    check()


@needs_produce
@pytest.mark.parametrize("version", range(3, 13))
def test_compiled_produce_decoding_agrees_on_every_byte_changed_and_every_cut(
    version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain one-record request with each byte set to edge values in turn, and cut at
    every length: both decodes answer alike (tag sections, lengths, nulls and varints all
    pass through these positions)."""
    fast = framing.FAST_PRODUCE
    partition = ProduceRequest.PartitionProduceData(index=3, records=crafted.good(1))
    topic = ProduceRequest.TopicProduceData(name="t", partition_data=[partition])
    request = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=5, topic_data=[topic])
    frame = framing.encode_request(request, version, 7, "client")[4:]
    assert fast is not None and fast(memoryview(bytearray(frame)), version) is not None
    for at in range(len(frame)):
        for value in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF):
            changed = bytearray(frame)
            changed[at] = value
            damaged = bytes(changed)
            assert _decoded(damaged, fast, monkeypatch) == _decoded(damaged, None, monkeypatch)
    for cut in range(len(frame)):
        short = frame[:cut]
        assert _decoded(short, fast, monkeypatch) == _decoded(short, None, monkeypatch)


ANSWER_CASES = [(m, v) for (m, v) in cases() if m.name == "ProduceResponse" and 3 <= v <= 12]


def _encoded(body: Any, version: int, fast: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(framing, "FAST_PRODUCE_ANSWER", fast)
    try:
        return [bytes(c) for c in framing.encode_response(body, version, 7)]  # type: ignore[arg-type]
    except Exception as e:
        return ("raised", type(e), str(e))


@needs_produce
@pytest.mark.parametrize("case", ANSWER_CASES, ids=[f"v{v}" for _, v in ANSWER_CASES])
def test_compiled_produce_answers_agree_with_the_generated_encoders(
    case: tuple[Any, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any ProduceResponse (v3-v12), and one with a field of the wrong type or out of range:
    the compiled encoding (where it answers) is byte for byte the generated one, and what it
    leaves to the generated encoders is answered by them alike."""
    msg, version = case
    fast = framing.FAST_PRODUCE_ANSWER
    assert fast is not None

    @settings(max_examples=25, deadline=None, database=None)
    @given(message_strategy(msg, version), st.data())
    def check(instance: Any, data: st.DataObject) -> None:
        assert _encoded(instance, version, fast, monkeypatch) == _encoded(
            instance, version, None, monkeypatch
        )
        partitions = [p for t in instance.responses for p in t.partition_responses]
        if partitions:
            bad = data.draw(st.sampled_from([None, "1", 2**63, -(2**31) - 1, True, 1.0]))
            field = data.draw(st.sampled_from(["index", "error_code", "base_offset"]))
            setattr(data.draw(st.sampled_from(partitions)), field, bad)
            assert _encoded(instance, version, fast, monkeypatch) == _encoded(
                instance, version, None, monkeypatch
            )

    check()


@needs_produce
@pytest.mark.parametrize("version", range(3, 13))
def test_the_plain_produce_answer_is_encoded_in_c(version: int) -> None:
    answer = ProduceResponse.PartitionProduceResponse(index=0, base_offset=41)
    topic = ProduceResponse.TopicProduceResponse(name="t", partition_responses=[answer])
    fast = framing.FAST_PRODUCE_ANSWER
    assert fast is not None
    whole = fast(ProduceResponse(responses=[topic]), version, 7)
    assert whole is not None
    generated: list[Any] = [b"\x00\x00\x00\x07"] + ([b"\x00"] if version >= 9 else [])
    ProduceResponse(responses=[topic]).write_to(generated, version)
    body = b"".join(generated)
    assert whole == len(body).to_bytes(4, "big") + body
