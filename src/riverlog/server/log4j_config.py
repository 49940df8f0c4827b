"""The broker's logging config file in log4j 1.x `log4j.properties` form (what Kafka ships as
`config/log4j.properties`), read into Python's `logging`:

    log4j.rootLogger=INFO, stdout, kafkaAppender
    log4j.appender.stdout=org.apache.log4j.ConsoleAppender
    log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
    log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
    log4j.appender.kafkaAppender=org.apache.log4j.DailyRollingFileAppender
    log4j.appender.kafkaAppender.DatePattern='.'yyyy-MM-dd-HH
    log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
    log4j.logger.riverlog.server.network=DEBUG
    log4j.logger.state.change.logger=TRACE, stateChangeAppender
    log4j.additivity.state.change.logger=false

Understood: `log4j.rootLogger` and `log4j.logger.NAME` (a level, then appender names),
`log4j.additivity.NAME`, and appenders of the classes ConsoleAppender (`Target`
System.out/System.err), FileAppender (`File`, `Append`), DailyRollingFileAppender (`File`,
`DatePattern` rolled by minute, hour or day) and RollingFileAppender (`File`, `MaxFileSize`,
`MaxBackupIndex`), each with `Threshold` and a PatternLayout (`ConversionPattern` with %d,
%d{ISO8601}, %p, %c, %m, %t, %n, %% and width modifiers) or SimpleLayout. `${name}` takes the
given variables (`kafka.logs.dir`), then the environment. Levels are log4j's names (see
`broker_loggers`). Anything else — an unknown key, class, conversion or variable — is a
`LogConfigError` naming the line, so a broker never starts logging other than it was told.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from riverlog.server.broker_loggers import ROOT, parse_level

P = "org.apache.log4j."
_CONVERSIONS = {"p": "levelname", "c": "name", "m": "message", "t": "threadName"}
_TOKEN = re.compile(r"%(-?\d+)?(?:\.(\d+))?([a-zA-Z%])(\{[^}]*\})?")
_VARIABLE = re.compile(r"\$\{([^}]+)\}")
_DATE_PATTERNS = {"'.'yyyy-MM-dd-HH-mm": "M", "'.'yyyy-MM-dd-HH": "H", "'.'yyyy-MM-dd": "D"}
_SIZE = re.compile(r"^(\d+)\s*(KB|MB|GB)?$", re.IGNORECASE)


class LogConfigError(ValueError):
    """A logging config file riverlog cannot honour."""


@dataclass
class Appender:
    name: str
    cls: str
    props: dict[str, str] = field(default_factory=dict)


@dataclass
class LoggerSpec:
    level: int | None
    appenders: list[str]
    additive: bool = True


@dataclass
class LogConfig:
    loggers: dict[str, LoggerSpec]
    """`root` and every named logger."""
    appenders: dict[str, Appender]


def convert_pattern(pattern: str) -> str:
    """A log4j ConversionPattern as a `logging` format."""
    out, at = [], 0
    for m in _TOKEN.finditer(pattern):
        out.append(pattern[at : m.start()].replace("%", "%%"))
        at = m.end()
        width, precision, conv, option = m.group(1), m.group(2), m.group(3), m.group(4)
        spec = (width or "") + (f".{precision}" if precision else "")
        if conv == "n":
            out.append("\n")
        elif conv == "%":
            out.append("%%")
        elif conv == "d":
            if option not in (None, "{ISO8601}"):
                raise LogConfigError(f"date format {option} is not supported (use %d)")
            out.append(f"%(asctime){spec}s")
        elif conv in _CONVERSIONS and option is None:
            out.append(f"%({_CONVERSIONS[conv]}){spec}s")
        else:
            raise LogConfigError(f"conversion %{conv}{option or ''} is not supported")
    out.append(pattern[at:].replace("%", "%%"))
    text = "".join(out)
    return text[:-1] if text.endswith("\n") else text


def _expand(value: str, variables: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in variables:
            return variables[name]
        if name in os.environ:
            return os.environ[name]
        raise LogConfigError(f"${{{name}}} is not defined")

    return _VARIABLE.sub(one, value)


def _logger_line(value: str) -> LoggerSpec:
    parts = [p.strip() for p in value.split(",")]
    level = parse_level(parts[0]) if parts[0] else None
    return LoggerSpec(level, [p for p in parts[1:] if p])


def parse(text: str, variables: Mapping[str, str]) -> LogConfig:
    config = LogConfig({ROOT: LoggerSpec(None, [])}, {})
    additivity: dict[str, bool] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), _expand(value.strip(), variables)
        try:
            if not sep:
                raise LogConfigError("not key=value")
            if key == "log4j.rootLogger":
                config.loggers[ROOT] = _logger_line(value)
            elif key.startswith("log4j.logger."):
                config.loggers[key.removeprefix("log4j.logger.")] = _logger_line(value)
            elif key.startswith("log4j.additivity."):
                if value.lower() not in ("true", "false"):
                    raise LogConfigError(f"additivity must be true or false, not {value!r}")
                additivity[key.removeprefix("log4j.additivity.")] = value.lower() == "true"
            elif key.startswith("log4j.appender."):
                name, _, prop = key.removeprefix("log4j.appender.").partition(".")
                if not prop:
                    config.appenders[name] = Appender(name, value)
                elif name in config.appenders:
                    config.appenders[name].props[prop] = value
                else:
                    raise LogConfigError(f"appender {name} is used before its class is given")
            else:
                raise LogConfigError(f"unknown key {key}")
        except ValueError as e:
            raise LogConfigError(f"line {number} ({line}): {e}") from None
    for name, additive in additivity.items():
        config.loggers.setdefault(name, LoggerSpec(None, [])).additive = additive
    for name, spec in config.loggers.items():
        for appender in spec.appenders:
            if appender not in config.appenders:
                raise LogConfigError(f"logger {name}: appender {appender} is not defined")
    return config


def _size(text: str) -> int:
    m = _SIZE.match(text.strip())
    if m is None:
        raise LogConfigError(f"MaxFileSize {text!r}: expected a number with KB, MB or GB")
    scale = {"": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[(m.group(2) or "").upper()]
    return int(m.group(1)) * scale


def _handler(appender: Appender) -> logging.Handler:
    props = dict(appender.props)
    cls = appender.cls.removeprefix(P)
    handler: logging.Handler
    if cls == "ConsoleAppender":
        target = props.pop("Target", "System.out")
        if target not in ("System.out", "System.err"):
            raise LogConfigError(f"appender {appender.name}: Target {target} is not supported")
        handler = logging.StreamHandler(sys.stdout if target == "System.out" else sys.stderr)
    elif cls in ("FileAppender", "DailyRollingFileAppender", "RollingFileAppender"):
        if "File" not in props:
            raise LogConfigError(f"appender {appender.name} needs a File")
        path = props.pop("File")
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if cls == "DailyRollingFileAppender":
            pattern = props.pop("DatePattern", "'.'yyyy-MM-dd")
            if pattern not in _DATE_PATTERNS:
                raise LogConfigError(
                    f"appender {appender.name}: DatePattern {pattern} is not "
                    f"supported ({', '.join(_DATE_PATTERNS)})"
                )
            handler = logging.handlers.TimedRotatingFileHandler(
                path, when=_DATE_PATTERNS[pattern], encoding="utf-8"
            )
        elif cls == "RollingFileAppender":
            handler = logging.handlers.RotatingFileHandler(
                path,
                maxBytes=_size(props.pop("MaxFileSize", "10MB")),
                backupCount=int(props.pop("MaxBackupIndex", "1")),
                encoding="utf-8",
            )
        else:
            append = props.pop("Append", "true").lower() == "true"
            handler = logging.FileHandler(path, mode="a" if append else "w", encoding="utf-8")
    else:
        raise LogConfigError(f"appender {appender.name}: class {appender.cls} is not supported")
    if "Threshold" in props:
        handler.setLevel(parse_level(props.pop("Threshold")))
    layout = props.pop("layout", P + "PatternLayout").removeprefix(P)
    if layout == "PatternLayout":
        handler.setFormatter(
            logging.Formatter(convert_pattern(props.pop("layout.ConversionPattern", "%m%n")))
        )
    elif layout == "SimpleLayout":
        handler.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))
    else:
        raise LogConfigError(f"appender {appender.name}: layout {layout} is not supported")
    if props:
        raise LogConfigError(f"appender {appender.name}: unknown settings {', '.join(props)}")
    return handler


def apply(config: LogConfig) -> None:
    """Configure `logging` as `config` says (handlers are built first: an error leaves the
    current configuration as it was)."""
    used = {a for spec in config.loggers.values() for a in spec.appenders}
    handlers = {name: _handler(config.appenders[name]) for name in sorted(used)}
    for name, spec in config.loggers.items():
        logger = logging.getLogger() if name == ROOT else logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        if spec.level is not None:
            logger.setLevel(spec.level)
        elif name == ROOT:
            logger.setLevel(logging.DEBUG)  # log4j's root level when none is given
        logger.propagate = spec.additive
        for appender in spec.appenders:
            logger.addHandler(handlers[appender])


def load(path: str, variables: Mapping[str, str]) -> LogConfig:
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), variables)
