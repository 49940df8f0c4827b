"""The broker's log4j.properties-style logging config: Kafka's own layout of the file is read,
applied to Python's logging, and honoured by `riverlog server --log-config`; what riverlog
cannot honour stops start-up with one clear line."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.server import log4j_config

KAFKA_STYLE = """
# as Kafka's config/log4j.properties lays it out
log4j.rootLogger=INFO, stdout, kafkaAppender
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.kafkaAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.kafkaAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=%-5p [%c] %m%n
log4j.appender.debugAppender=org.apache.log4j.RollingFileAppender
log4j.appender.debugAppender.File=${kafka.logs.dir}/network-debug.log
log4j.appender.debugAppender.MaxFileSize=1MB
log4j.appender.debugAppender.MaxBackupIndex=2
log4j.appender.debugAppender.Threshold=DEBUG
log4j.logger.riverlog.server.network=DEBUG, debugAppender
log4j.additivity.riverlog.server.network=false
"""


@pytest.fixture
def restored() -> Iterator[None]:
    names = ["", "riverlog.server.network"]
    saved = {
        n: (
            logging.getLogger(n).level,
            list(logging.getLogger(n).handlers),
            logging.getLogger(n).propagate,
        )
        for n in names
    }
    yield
    for name, (level, handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            logger.removeHandler(h)
            if h not in handlers:
                h.close()
        for h in handlers:
            logger.addHandler(h)
        logger.setLevel(level)
        logger.propagate = propagate


def test_kafka_layout_is_applied(tmp_path: Path, restored: None) -> None:
    config = log4j_config.parse(KAFKA_STYLE, {"kafka.logs.dir": str(tmp_path)})
    assert config.loggers["root"].appenders == ["stdout", "kafkaAppender"]
    log4j_config.apply(config)
    network = logging.getLogger("riverlog.server.network")
    assert network.level == logging.DEBUG and network.propagate is False
    logging.getLogger("riverlog.server.broker").info("hello %s", "world")
    network.debug("a frame")
    for h in [*logging.getLogger().handlers, *network.handlers]:
        h.flush()
    assert (tmp_path / "server.log").read_text() == "INFO  [riverlog.server.broker] hello world\n"
    assert (tmp_path / "network-debug.log").read_text() == "a frame\n"


def test_patterns() -> None:
    assert log4j_config.convert_pattern("[%d] %p %m (%c)%n") == (
        "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
    )
    assert log4j_config.convert_pattern("%d{ISO8601} %-5p %t 100%% %m%n") == (
        "%(asctime)s %(levelname)-5s %(threadName)s 100%% %(message)s"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("log4j.rootLogger=LOUD", "not a supported log level"),
        ("log4j.rootLogger=INFO, nowhere", "appender nowhere is not defined"),
        (
            "log4j.appender.x=org.apache.log4j.net.SyslogAppender\nlog4j.rootLogger=INFO, x",
            "SyslogAppender is not supported",
        ),
        (
            "log4j.appender.x=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.x.layout.ConversionPattern=%c{1} %m\nlog4j.rootLogger=INFO, x",
            r"conversion %c\{1\} is not supported",
        ),
        ("log4j.appender.x.File=/tmp/x", "used before its class"),
        (
            "log4j.appender.f=org.apache.log4j.FileAppender\nlog4j.appender.f.File=${nope.dir}/x",
            r"\$\{nope.dir\} is not defined",
        ),
        ("log4j.threshold=INFO", "unknown key log4j.threshold"),
        (
            "log4j.appender.x=org.apache.log4j.ConsoleAppender\nlog4j.appender.x.Encoding=UTF-8\n"
            "log4j.rootLogger=INFO, x",
            "unknown settings Encoding",
        ),
    ],
)
def test_what_cannot_be_honoured_is_refused(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(log4j_config.LogConfigError, match=message):
        log4j_config.apply(log4j_config.parse(text, {"kafka.logs.dir": str(tmp_path)}))


def _server(tmp_path: Path, log_config: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riverlog.cli.main",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
            "--log-config",
            str(log_config),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_server_logs_as_the_file_says(tmp_path: Path) -> None:
    log_config = tmp_path / "log4j.properties"
    log_config.write_text(KAFKA_STYLE)
    proc = _server(tmp_path, log_config)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while "listening on" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            line = proc.stdout.readline()
        server_log = tmp_path / "data" / "server.log"
        text = server_log.read_text()
        assert re.search(r"^INFO  \[riverlog\.server\.\S+\] ", text, re.MULTILINE), text
    finally:
        proc.terminate()
        proc.wait(30)


def test_server_refuses_a_config_it_cannot_honour(tmp_path: Path) -> None:
    log_config = tmp_path / "log4j.properties"
    log_config.write_text(
        "log4j.rootLogger=INFO, syslog\nlog4j.appender.syslog=org.apache.log4j.net.SyslogAppender\n"
    )
    proc = _server(tmp_path, log_config)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        "riverlog server: appender syslog: class org.apache.log4j.net.SyslogAppender is not "
        "supported"
    ]
