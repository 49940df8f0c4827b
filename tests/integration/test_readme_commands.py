"""Every command of the README's shell blocks runs, as written, against real brokers.

Each ```sh block is split into commands (continuation lines joined) and run by bash in a
scratch directory where `riverlog` and `.venv/bin/riverlog` are this checkout's CLI. The
addresses the README uses are mapped onto brokers the test starts: the "Running a broker"
block gets its own `riverlog server` on a free port, the dev-cluster blocks the cluster their
own `riverlog cluster up` starts (kept until their `cluster down`, run last), and the tools
block an embedded broker (`127.0.0.1:9092` there is the embedded broker's address,
`$DATA_DIR` its data directory; for the state-change log merger, which needs a cluster
broker's `state-change.log`, the dev cluster's first broker's). Commands that run until
stopped (a broker, the web console, and replica-verification, as Kafka's) are stopped once
they have printed their first line; a usage line's optional `[--flag value]` parts are left
out and the web console gets a free port.
Not run: `./dev ...` (the CI's own entry points; `./dev test` is this suite) and the
security block's commands on `$B` (they need a SASL_SSL cluster and its `admin.properties`;
the security tests run the same tools against one).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riverlog.embedded import broker

pytestmark = pytest.mark.timeout(420)

README = Path(__file__).resolve().parents[2] / "README.md"
LONG_RUNNING = ("riverlog server", "riverlog replica-verification", "riverlog console --")


def shell_blocks(text: str) -> list[list[str]]:
    """The commands of each ```sh block, a command's continuation lines joined."""
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", text, re.S):
        commands: list[str] = []
        pending = ""
        for line in body.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            if command and not command.startswith("#"):
                commands.append(command)
        blocks.append(commands)
    return blocks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Runner:
    """Runs README commands with `riverlog` meaning this checkout's CLI."""

    def __init__(self, work: Path) -> None:
        self.work = work
        bin_dir = work / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "riverlog"
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m riverlog "$@"\n')
        wrapper.chmod(0o755)
        (work / ".venv" / "bin").mkdir(parents=True)
        (work / ".venv" / "bin" / "riverlog").symlink_to(wrapper)
        src = str(Path(__file__).resolve().parents[2] / "src")
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        self.ran: list[str] = []

    def run(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        self.ran.append(command)
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return done

    def run_until_first_line(self, command: str, timeout: float = 60) -> str:
        """Start a command that runs until stopped; return its first line, then stop it."""
        self.ran.append(command)
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + timeout
            line = ""
            while not line and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line and proc.poll() is not None:
                    break
            return line
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(30)


def _ok(done: subprocess.CompletedProcess[str], command: str) -> None:
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"


def test_every_readme_command_runs(tmp_path: Path) -> None:
    blocks = shell_blocks(README.read_text(encoding="utf-8"))
    runner = Runner(tmp_path)
    skipped = [c for block in blocks for c in block if c.startswith("./dev ")]
    secured = [c for block in blocks for c in block if "$B " in c]
    cluster_dir = tmp_path / "cluster"
    deferred: list[str] = []
    with broker() as embedded:
        for block in blocks:
            for command in block:
                if command.startswith("./dev ") or "$B " in command:
                    continue
                if "cluster up" in command:
                    command = command.replace(
                        "cluster up",
                        f"cluster up --port 0 --zookeeper-port 0 --dir {cluster_dir}",
                        1,
                    )
                    assert command.startswith("export BOOTSTRAP=$(")
                    inner = command[len("export BOOTSTRAP=$(") : command.rindex(")")]
                    done = runner.run(inner, timeout=180)
                    _ok(done, inner)
                    runner.env["BOOTSTRAP"] = done.stdout.strip()
                    continue
                if "cluster down" in command:
                    deferred.append(
                        command.replace("cluster down", f"cluster down --dir {cluster_dir}")
                    )
                    continue
                if command.startswith(".venv/bin/riverlog server"):
                    port = _free_port()
                    command = command.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
                    command = command.replace("/tmp/riverlog-data", str(tmp_path / "single"))
                    line = runner.run_until_first_line(command)
                    assert f"listening on 127.0.0.1:{port}" in line, line
                    continue
                if command.startswith("kcat "):
                    # kcat -L against the broker of the block above: start it again for kcat
                    port = _free_port()
                    server = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "riverlog",
                            "server",
                            "--listen",
                            f"127.0.0.1:{port}",
                            "--data-dir",
                            str(tmp_path / "single"),
                        ],
                        env=runner.env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                    )
                    try:
                        assert server.stdout is not None
                        assert b"listening" in server.stdout.readline()
                        done = runner.run(command.replace("127.0.0.1:9092", f"127.0.0.1:{port}"))
                        _ok(done, command)
                        assert "1 brokers:" in done.stdout
                    finally:
                        server.terminate()
                        server.wait(30)
                    continue
                command = command.replace("127.0.0.1:9092", embedded.bootstrap_servers)
                command = re.sub(r" \[--[^\]]*\]", "", command)  # a usage line's optional flags
                command = command.replace("127.0.0.1:8080", f"127.0.0.1:{_free_port()}")
                runner.env["DATA_DIR"] = str(embedded.config["log.dirs"][0])
                if "state-change-log-merger" in command:  # a cluster broker's log.dirs
                    runner.env["DATA_DIR"] = str(cluster_dir / "broker-1")
                if any(command.startswith(p) for p in LONG_RUNNING):
                    line = runner.run_until_first_line(command)
                    assert line.strip(), command
                    continue
                if command.startswith("riverlog reassign-partitions"):
                    _prepare_reassignment(runner, command)
                    continue
                _ok(runner.run(command), command)
        for command in deferred:
            _ok(runner.run(command, timeout=120), command)
    assert [c.split("#")[0].strip() for c in skipped] == ["./dev run", "./dev test"]
    assert all(c.startswith(("riverlog configs", "riverlog acls")) for c in secured)
    assert len(runner.ran) >= 25


def _prepare_reassignment(runner: Runner, command: str) -> None:
    """The reassignment block moves `events` onto brokers 4,5,6, which the 3-broker dev
    cluster lacks: the commands run with the cluster's own brokers instead."""
    command = command.replace("--broker-list 4,5,6", "--broker-list 1,2,3")
    if "--generate" in command:
        (runner.work / "topics.json").write_text('{"version":1,"topics":[{"topic":"events"}]}')
        done = runner.run(command)
        _ok(done, command)
        proposed = done.stdout.split("Proposed partition reassignment configuration")[1]
        (runner.work / "plan.json").write_text(proposed.strip())
        return
    if "--verify" in command:
        deadline = time.monotonic() + 90
        while (done := runner.run(command)).returncode != 0:
            assert time.monotonic() < deadline, done.stdout + done.stderr
            time.sleep(1)
        return
    _ok(runner.run(command), command)
