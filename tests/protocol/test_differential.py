"""Differential tests: our generated codec against two independent Kafka encoders.

For every (message, version) pair that an oracle also implements, hypothesis builds instances
of our generated class (fields present at that version only, from the same schema model as the
round-trip tests), each instance is converted to the oracle's own representation by a generic,
field-name driven converter, and then

* our encoding and the oracle's encoding must be byte-for-byte identical, and
* our decoder must read the oracle's bytes back to the original instance.

Oracles (dev dependencies, used here only):

* kio 0.6.5 — frozen dataclasses per (message, version), snake_case field names like ours,
  except that `*_ms` durations/timestamps are `timedelta`/`datetime` fields without the
  suffix and error codes are an `ErrorCode` enum.
* kafka-python 3.0.12 — schema-driven `ApiMessage` classes (`kafka.protocol.*`), a separate
  encoder implementation over the same upstream JSON schemas.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.readers import tz_aware_from_i64
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64, i64Timedelta

from tests.protocol import schema_strategies as ss
from tests.protocol.schema_strategies import generated_class

EXAMPLES = 15  # x ~1000 pairs; keeps the file well under a minute
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- kio --------------------------------------------------------------------------------------

KIO_KIND = {"request": EntityType.request, "response": EntityType.response}
KIO_ERROR_CODES = sorted(int(e.value) for e in ErrorCode)
# kio converts durations through float seconds (`round(td.total_seconds() * 1000)`), exact only
# while the millisecond count fits a double's 53-bit mantissa; larger i64 durations are an oracle
# limitation, not a property of the wire format, so the strategy stays below that.
KIO_I64_TIMEDELTA_MS = 2**50
# Same for timestamps (through `datetime.timestamp()`); -1 ("no timestamp") is kio's None.
KIO_MAX_DATETIME_MS = 2**44


def _kio_class(msg: ss.schema.Message, version: int) -> Any | None:
    """kio's class for our message at `version`, or None where kio lacks it."""
    if msg.kind not in KIO_KIND or msg.api_key not in api_key_map:
        return None
    if version not in schema_name_map[api_key_map[msg.api_key]]:
        return None  # e.g. Produce v0-v2: Kafka 4 dropped them from its schemas, kio too
    module = load_payload_module(msg.api_key, version, KIO_KIND[msg.kind])
    return getattr(module, msg.name, None)


def _kio_fields(kio_cls: Any) -> dict[str, dataclasses.Field[Any]]:
    """kio's fields by our attribute name (kio drops `_ms` where it uses time types)."""
    out = {}
    for f in dataclasses.fields(kio_cls):
        kind = classify_field(f)
        ours = f.name
        if not isinstance(kind, EntityField | EntityTupleField) and get_schema_field_type(
            f
        ).startswith(("timedelta_", "datetime_")):
            ours += "_ms"
        out[ours] = f
    return out


def _kio_nested(f: dataclasses.Field[Any]) -> Any:
    kind = classify_field(f)
    assert isinstance(kind, EntityField | EntityTupleField)
    return kind.type_


def _kio_scalar(f: dataclasses.Field[Any], ours: ss.schema.Field) -> st.SearchStrategy[Any]:
    kafka_type = get_schema_field_type(f)
    if kafka_type == "error_code":
        # kio represents error codes as an enum: only codes it knows are representable.
        return st.sampled_from(KIO_ERROR_CODES)
    if kafka_type == "timedelta_i64":
        return st.integers(-KIO_I64_TIMEDELTA_MS, KIO_I64_TIMEDELTA_MS)
    if kafka_type == "datetime_i64":
        # kio rejects negative timestamps except -1 where its field is optional (-> None).
        timestamps = st.integers(0, KIO_MAX_DATETIME_MS)
        return st.just(-1) | timestamps if is_optional(f) else timestamps
    return ss._scalar(ours.element)


def kio_struct_strategy(
    msg: ss.schema.Message, struct: ss.schema.Struct, version: int, kio_cls: Any
) -> st.SearchStrategy[Any]:
    kio_fields = _kio_fields(kio_cls)
    present = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        kf = kio_fields[f.attr]
        if f.struct is not None:
            element = kio_struct_strategy(msg, f.struct, version, _kio_nested(kf))
        else:
            element = _kio_scalar(kf, f)
        strategy = st.lists(element, max_size=3) if f.is_array else element
        if version in f.nullable:
            strategy = st.none() | strategy
        present[f.attr] = strategy
    return st.builds(generated_class(struct.class_path), **present)


def _kio_value(f: dataclasses.Field[Any], value: Any) -> Any:
    kind = classify_field(f)
    if value is None:
        return None
    if isinstance(kind, EntityTupleField):
        return tuple(to_kio(v, kind.type_) for v in value)
    if isinstance(kind, EntityField):
        return to_kio(value, kind.type_)
    if isinstance(kind, PrimitiveTupleField):
        return tuple(value)
    kafka_type = get_schema_field_type(f)
    if kafka_type == "error_code":
        return ErrorCode(value)
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(milliseconds=value))
    if kafka_type == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(milliseconds=value))
    if kafka_type == "datetime_i64":
        if value == -1 and is_optional(f):
            return None
        return tz_aware_from_i64(i64(value))
    if kafka_type in ("bytes", "records"):
        return bytes(value)
    if kafka_type == "uuid" and value.int == 0 and is_optional(f):
        return None  # kio's reader gives None for the all-zero uuid (and writes None as it)
    return value


def to_kio(obj: Any, kio_cls: Any) -> Any:
    """Our instance as kio's dataclass, field by field."""
    return kio_cls(
        **{f.name: _kio_value(f, getattr(obj, attr)) for attr, f in _kio_fields(kio_cls).items()}
    )


def kio_encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


KIO_CASES = [(m, v, k) for m, v in ss.cases() if (k := _kio_class(m, v)) is not None]


@pytest.mark.parametrize("case", KIO_CASES, ids=[f"{m.name}-v{v}" for m, v, _ in KIO_CASES])
def test_same_bytes_as_kio(case: tuple[ss.schema.Message, int, Any]) -> None:
    msg, version, kio_cls = case
    cls = generated_class(msg.name)
    reader = entity_reader(kio_cls)

    @SETTINGS
    @given(kio_struct_strategy(msg, msg.root, version, kio_cls))
    def check(instance: Any) -> None:
        theirs = to_kio(instance, kio_cls)
        expected = kio_encode(theirs)
        assert instance.encode(version) == expected
        assert cls.decode(expected, version) == instance
        decoded, size = reader(expected, 0)
        assert size == len(expected)
        assert decoded == theirs

    check()


# --- kafka-python -----------------------------------------------------------------------------


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_all_subclasses(sub)]
    return out


def _kp_classes() -> dict[str, Any]:
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer  # noqa: F401  (the imports register the classes)
    from kafka.protocol.api_message import ApiMessage as KpApiMessage

    return {c.__name__: c for c in _all_subclasses(KpApiMessage) if c._class_version is None}


KP_CLASSES = _kp_classes()


def _norm(name: str) -> str:
    return name.replace("_", "")


def _kp_attr(kp_field: Any, ours: ss.schema.Struct) -> ss.schema.Field:
    """Our field for kafka-python's: its names drop underscores differently (`z_k_...` for
    `ZK...`), and its `json_patch` renames the `*AuthorizedOperations` int32 fields to an
    `authorized_operations` bitfield (a set of bit numbers)."""
    for f in ours.fields:
        if _norm(f.attr) == _norm(kp_field.name):
            return f
    if kp_field.type_str == "bitfield":
        (f,) = [f for f in ours.fields if f.attr.endswith(kp_field.name)]
        return f
    raise AssertionError(f"no field of ours for kafka-python's {kp_field.name}")


def _to_bitfield(value: int) -> set[int] | None:
    bits = {i for i in range(32) if (value & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits  # kafka-python's None is -2**31 ("not requested")


def _kp_value(kp_field: Any, value: Any, version: int) -> Any:
    if value is None:
        return None
    if kp_field.is_struct_array():
        return [_kp_fields(kp_field, v, version) for v in value]
    if kp_field.is_struct():
        return _kp_fields(kp_field, value, version)
    if kp_field.type_str == "bitfield":
        return _to_bitfield(value)
    if kp_field.is_array():
        return list(value)
    if kp_field.type_str in ("bytes", "records"):
        return bytes(value)
    if kp_field.type_str == "uuid" and value.int == 0:
        return None  # kafka-python's all-zero uuid (its default: a tagged one is left out)
    return value


def _kp_fields(kp_struct: Any, obj: Any, version: int) -> Any:
    vals = {
        f.name: _kp_value(f, getattr(obj, _kp_attr(f, _our_struct(obj)).attr), version)
        for f in kp_struct.fields.values()
        if f.for_version_q(version)
    }
    if kp_struct.data_class is None:
        return vals
    return kp_struct.data_class(**vals)


_OUR_STRUCTS: dict[type, ss.schema.Struct] = {}


def _our_struct(obj: Any) -> ss.schema.Struct:
    return _OUR_STRUCTS[type(obj)]


for _m in ss.all_messages():
    for _s in [_m.root, *_m.structs]:
        _OUR_STRUCTS[generated_class(_s.class_path)] = _s


def to_kafka_python(obj: Any, kp_cls: Any, version: int) -> Any:
    """Our instance as kafka-python's message object at `version`."""
    vals = {
        f.name: _kp_value(f, getattr(obj, _kp_attr(f, _our_struct(obj)).attr), version)
        for f in kp_cls._struct.fields.values()
        if f.for_version_q(version)
    }
    return kp_cls(version=version, **vals)


KP_CASES = [
    (m, v, KP_CLASSES[m.name])
    for m, v in ss.cases()
    if m.name in KP_CLASSES and v <= KP_CLASSES[m.name].max_version
]


@pytest.mark.parametrize("case", KP_CASES, ids=[f"{m.name}-v{v}" for m, v, _ in KP_CASES])
def test_same_bytes_as_kafka_python(case: tuple[ss.schema.Message, int, Any]) -> None:
    msg, version, kp_cls = case
    cls = generated_class(msg.name)

    @SETTINGS
    @given(ss.message_strategy(msg, version))
    def check(instance: Any) -> None:
        theirs = to_kafka_python(instance, kp_cls, version)
        expected = bytes(theirs.encode(version))
        assert instance.encode(version) == expected
        assert cls.decode(expected, version) == instance
        # kafka-python reads our bytes and writes them back unchanged. (Not compared as objects:
        # it decodes the zero uuid as None and ApiVersionsResponse errors as a v0 body.)
        if msg.name == "ApiVersionsResponse" and instance.error_code != 0:
            # kafka-python reads any ApiVersions error response as a v0 body (the broker's
            # answer to an unsupported version), so it cannot read these bodies back.
            return
        decoded = kp_cls.decode(instance.encode(version), version)
        decoded._header = None  # its compiled decoder skips __init__, which encode() relies on
        assert bytes(decoded.encode(version)) == expected

    check()
