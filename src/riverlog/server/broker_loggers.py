"""Dynamic log levels: the BROKER_LOGGER config resource (type 8) of DescribeConfigs and
IncrementalAlterConfigs, as Kafka's `Log4jController` and `ConfigAdminManager` serve it, over
Python's `logging` loggers.

The loggers a broker exposes are the root logger, named `root` as in Kafka, every logger of
riverlog (`riverlog`, `riverlog.server.network`, ...; those the process has created) and the
Kafka-named ones riverlog keeps (`state.change.logger`). Levels are log4j's names, mapped to
Python's numbers: ALL 1, TRACE 5, DEBUG 10, INFO 20, WARN 30, ERROR 40, FATAL 50, OFF 60 (a
Python level between two names is described by the lower name). A logger's described value is
its effective level (its own, else its nearest ancestor's), as log4j reports it.

Errors are Kafka's: a resource named by another broker's id is INVALID_REQUEST ("Unexpected
broker id"), an unknown logger or level INVALID_CONFIG, APPEND/SUBTRACT and deleting the root
logger's level INVALID_REQUEST. A request is validated whole before any level changes.
The levels live in the process only: a restart starts again from the logging config file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

BROKER_LOGGER = 8
ROOT = "root"
KAFKA_NAMED = ("state.change.logger",)
LEVELS = {
    "ALL": 1,
    "TRACE": 5,
    "DEBUG": 10,
    "INFO": 20,
    "WARN": 30,
    "ERROR": 40,
    "FATAL": 50,
    "OFF": 60,
}
VALID = ", ".join(sorted(LEVELS))
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def level_name(level: int) -> str:
    """log4j's name for a Python level (the highest name at or below it)."""
    return max((v, k) for k, v in LEVELS.items() if v <= max(level, 1))[1]


def parse_level(text: str) -> int:
    """A log4j level name (or Python's WARNING/CRITICAL) as a Python level; ValueError else."""
    name = {"WARNING": "WARN", "CRITICAL": "FATAL"}.get(text.strip().upper(), text.strip().upper())
    if name not in LEVELS:
        raise ValueError(f"{text!r} is not a supported log level. Valid log levels are {VALID}")
    return LEVELS[name]


def _exposed(name: str) -> bool:
    return name == "riverlog" or name.startswith("riverlog.") or name in KAFKA_NAMED


def logger_names() -> list[str]:
    """Every logger a broker describes: `root` first, then the others by name."""
    known = [n for n in logging.Logger.manager.loggerDict if _exposed(n)]
    return [ROOT, *sorted(known)]


def _logger(name: str) -> logging.Logger:
    if name == ROOT:
        return logging.getLogger()
    if name not in logging.Logger.manager.loggerDict or not _exposed(name):
        raise KafkaError(error_codes.INVALID_CONFIG, f"Logger {name} does not exist!")
    return logging.getLogger(name)


def check_broker(resource_name: str, broker_id: int) -> None:
    if resource_name != str(broker_id):
        raise KafkaError(
            error_codes.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker_id}, but received {resource_name}",
        )


def describe(keys: Iterable[str] | None) -> list[tuple[str, str]]:
    """(logger, effective level) for `keys` (None: every exposed logger)."""
    names = logger_names() if keys is None else list(keys)
    return [(n, level_name(_logger(n).getEffectiveLevel())) for n in names]


def alter(changes: Iterable[tuple[str, int, str | None]], validate_only: bool) -> None:
    """Apply (logger, operation, value) changes: SET a level, DELETE a logger's own level
    (it inherits again). All are checked before any is applied."""
    plan: list[tuple[logging.Logger, int]] = []
    for name, operation, value in changes:
        if operation in (APPEND, SUBTRACT):
            op = "APPEND" if operation == APPEND else "SUBTRACT"
            raise KafkaError(
                error_codes.INVALID_REQUEST,
                f"{op} operation is not allowed for the BROKER_LOGGER resource",
            )
        logger = _logger(name)
        if operation == SET:
            try:
                plan.append((logger, parse_level(value or "")))
            except ValueError:
                raise KafkaError(
                    error_codes.INVALID_CONFIG,
                    f"Cannot set the log level of {name} to {value} as it is not a supported "
                    f"log level. Valid log levels are {VALID}",
                ) from None
        elif operation == DELETE:
            if name == ROOT:
                raise KafkaError(
                    error_codes.INVALID_REQUEST,
                    f"Removing the log level of the {ROOT} logger is not allowed",
                )
            plan.append((logger, logging.NOTSET))
        else:
            raise KafkaError(error_codes.INVALID_REQUEST, f"Unknown operation {operation}.")
    if not validate_only:
        for logger, level in plan:
            logger.setLevel(level)
