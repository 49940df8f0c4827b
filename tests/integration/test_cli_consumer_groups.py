"""`riverlog consumer-groups` against a broker process, with a confluent-kafka group:
list, describe (lag), members, state, reset offsets (dry run, execute, refusal while
active), delete offsets, delete."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess


def groups_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "consumer-groups",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(output: str) -> list[list[str]]:
    """The table rows (header excluded) of a command's output, split on whitespace."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    return lines[1:]


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "cli-test",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def take(c: Consumer, count: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == count
    return got


def moment(epoch_ms: int) -> str:
    """An instant in --to-datetime's format (UTC)."""
    when = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def test_describe_reset_and_delete_a_group(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic, group = f"cg-{uuid.uuid4().hex[:6]}", f"shop-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bs})
    base = (int(time.time()) - 60) * 1000  # a whole second, a minute ago
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=0, timestamp=base + i)
    assert producer.flush(15) == 0

    member = consumer(bs, group)
    member.subscribe([topic])
    got = take(member, 6)
    member.commit(got[-1], asynchronous=False)  # committed offset 6 of 10

    assert group in groups_cli(bs, "--list").stdout.splitlines()
    assert [group, "Stable"] in rows(groups_cli(bs, "--list", "--state").stdout)
    described = groups_cli(bs, "--describe", "--group", group)
    assert described.returncode == 0, described.stderr
    [row] = rows(described.stdout)
    assert row[:6] == [group, topic, "0", "6", "10", "4"]
    assert row[6].startswith("cli-test-") and row[7] == "/127.0.0.1" and row[8] == "cli-test"
    members = rows(groups_cli(bs, "--describe", "--group", group, "--members", "--verbose").stdout)
    assert members == [[group, row[6], "/127.0.0.1", "cli-test", "1", f"{topic}(0)"]]
    state = rows(groups_cli(bs, "--describe", "--group", group, "--state").stdout)
    assert state[0][0] == group and state[0][-3:] == ["range", "Stable", "1"]

    refused = groups_cli(
        bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"
    )
    assert refused.returncode == 0
    assert (
        f"Error: Assignments can only be reset if the group '{group}' is inactive, but the "
        "current state is Stable." in refused.stderr
    )
    member.close()

    idle = groups_cli(bs, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in idle.stderr
    assert rows(idle.stdout) == [[group, topic, "0", "6", "10", "4", "-", "-", "-"]]

    dry = groups_cli(
        bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run"
    )
    assert rows(dry.stdout) == [[group, topic, "0", "0"]]
    assert rows(groups_cli(bs, "--describe", "--group", group).stdout)[0][3] == "6"  # unchanged

    shifted = groups_cli(
        bs, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "-2", "--execute"
    )
    assert rows(shifted.stdout) == [[group, topic, "0", "4"]]
    by_time = groups_cli(
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:0",
        "--to-datetime",
        moment(base + 3),
        "--execute",
    )
    assert rows(by_time.stdout) == [[group, topic, "0", "3"]]
    resumed = consumer(bs, group)
    resumed.subscribe([topic])
    assert take(resumed, 1)[0].offset() == 3
    resumed.close()

    deleted_offsets = groups_cli(bs, "--delete-offsets", "--group", group, "--topic", topic)
    assert f"Request succeed for deleting offsets with topic {topic} group {group}" in (
        deleted_offsets.stdout
    )
    assert rows(groups_cli(bs, "--describe", "--group", group).stdout) == []
    deleted = groups_cli(bs, "--delete", "--group", group)
    assert deleted.stdout == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    missing = groups_cli(bs, "--describe", "--group", group)
    assert missing.stderr.strip() == f"Error: Consumer group '{group}' does not exist."


def test_bad_flags_exit_with_an_error(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    no_scope = groups_cli(bs, "--reset-offsets", "--group", "g", "--to-earliest")
    assert no_scope.returncode == 1 and "--all-topics, --topic" in no_scope.stderr
    no_scenario = groups_cli(bs, "--reset-offsets", "--group", "g", "--all-topics")
    assert no_scenario.returncode == 1 and "reset scenarios" in no_scenario.stderr
    stray = groups_cli(bs, "--describe", "--group", "g", "--to-latest")
    assert stray.returncode == 1 and "--to-latest needs --reset-offsets" in stray.stderr
    no_group = groups_cli(bs, "--describe")
    assert no_group.returncode == 1 and "--group or --all-groups" in no_group.stderr
