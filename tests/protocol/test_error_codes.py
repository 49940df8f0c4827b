"""The error table against kafka-python's independent one: same codes, names, messages present."""

from __future__ import annotations

import re

import kafka.errors

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import BY_CODE, KafkaError, for_code

# Java's RetriableException family where kafka-python marks the error non-retriable.
JAVA_RETRIABLE_BUT_NOT_IN_KAFKA_PYTHON = {2, 13, 74, 75, 83, 84}  # CORRUPT_MESSAGE is retriable


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel.removesuffix("Error")).upper()


def test_every_code_kafka_python_knows_is_in_the_table() -> None:
    theirs = {code: cls for code, cls in kafka.errors.kafka_errors.items() if code is not None}
    assert set(theirs) <= set(BY_CODE)
    assert set(theirs) == set(range(-1, 128))


def test_codes_are_unique_and_every_constant_is_indexed() -> None:
    constants = [v for v in vars(error_codes).values() if isinstance(v, error_codes.ErrorCode)]
    assert len({c.code for c in constants}) == len(constants) == len(BY_CODE)
    for c in constants:
        assert getattr(error_codes, c.name) is c
        assert c.code == 0 or c.message.endswith(".")


def test_names_agree_with_kafka_python_where_it_uses_kafkas_name() -> None:
    # kafka-python spells most errors as CamelCase of Kafka's name; count the agreements so a
    # shifted row in our table (a name at the wrong code) cannot go unnoticed.
    agree = sum(
        1
        for code, cls in kafka.errors.kafka_errors.items()
        if code is not None and _snake(cls.__name__) == BY_CODE[code].name
    )
    assert agree >= 90


def test_retriable_flags_follow_java() -> None:
    for code, cls in kafka.errors.kafka_errors.items():
        if code is None or code in JAVA_RETRIABLE_BUT_NOT_IN_KAFKA_PYTHON:
            continue
        assert BY_CODE[code].retriable == cls.retriable, BY_CODE[code].name
    for code in JAVA_RETRIABLE_BUT_NOT_IN_KAFKA_PYTHON:
        assert BY_CODE[code].retriable


def test_unknown_code_maps_to_a_generic_entry() -> None:
    entry = for_code(31337)
    assert entry.code == 31337 and not entry.retriable
    assert for_code(6) is error_codes.NOT_LEADER_OR_FOLLOWER


def test_kafka_error_carries_code_and_message() -> None:
    err = KafkaError(error_codes.TOPIC_ALREADY_EXISTS, "Topic 'x' already exists.")
    assert (err.code, err.retriable, str(err)) == (36, False, "Topic 'x' already exists.")
    assert KafkaError(error_codes.NOT_COORDINATOR).message == error_codes.NOT_COORDINATOR.message
