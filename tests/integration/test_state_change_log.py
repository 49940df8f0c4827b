"""The state-change log of a failover, merged across brokers, reads as one ordered story.

Three broker processes around a real ZooKeeper: a topic is created, the leader of one of its
partitions is killed (SIGKILL) and restarted. Each broker wrote `state-change.log` in its data
directory; `riverlog state-change-log-merger` merges them by time and filters by topic,
partition and time.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime

import pytest

from tests.cluster_harness import (
    Cluster,
    controller_of,
    create_assigned_topic,
    isr_full,
    partitions_of,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)


def merger(cluster: Cluster, *args: str) -> list[str]:
    logs = ",".join(str(b.data_dir / "state-change.log") for b in cluster.brokers.values())
    out = subprocess.run(
        [sys.executable, "-m", "riverlog", "state-change-log-merger", "--logs", logs, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def first(lines: list[str], pattern: str, after: int = -1) -> int:
    """Index of the first line after `after` that `pattern` finds."""
    for i, line in enumerate(lines):
        if i > after and re.search(pattern, line):
            return i
    raise AssertionError(f"no line after {after} matches {pattern!r}:\n" + "\n".join(lines))


def test_a_failover_reads_as_one_ordered_story(cluster: Cluster) -> None:
    wait_until(lambda: controller_of(cluster) > 0, 15, "a controller")
    controller = controller_of(cluster)
    victim, survivor = [b for b in cluster.brokers if b != controller]
    plan = [[victim, survivor, controller], [survivor, controller, victim]]
    topic = create_assigned_topic(cluster, plan)

    before_kill = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    time.sleep(0.01)
    cluster.brokers[victim].kill()
    wait_until(lambda: partitions_of(cluster, topic)[0][0] == survivor, 30, "a new leader")
    cluster.brokers[victim].start()
    wait_until(lambda: isr_full(cluster, topic), 30, "the victim back in the ISR")

    story = merger(cluster, "--topic", topic, "--partitions", "0")
    stamps = [line[1:24] for line in story]
    assert stamps == sorted(stamps)
    assert all(f"{topic}-0" in line for line in story)
    assert {f"[Broker id={b}]" for b in cluster.brokers} <= {
        m.group(0) for line in story for m in [re.search(r"\[Broker id=\d\]", line)] if m
    }, "every broker's log is in the merge"
    p0 = re.escape(f"{topic}-0")
    c = f"Controller id={controller} epoch=\\d+"
    created = first(
        story,
        rf"{c}\] Changed partition {p0} from NewPartition to "
        rf"OnlinePartition with state LeaderAndIsr\(leader={victim}, "
        r"leaderEpoch=0, ",
    )
    led = first(
        story,
        rf"\[Broker id={victim}\] Handled LeaderAndIsr .* partition {p0}: "
        r"became leader with leader epoch 0",
        created,
    )
    failed_over = first(
        story,
        rf"{c}\] Changed partition {p0} from OnlinePartition to "
        rf"OnlinePartition with state LeaderAndIsr\(leader={survivor}, "
        r"leaderEpoch=1, ",
        led,
    )
    sent = first(
        story,
        rf"{c}\] Sending become-leader LeaderAndIsr request .*leader={survivor}, "
        rf"leaderEpoch=1.* to broker {survivor} for partition {p0}",
        failed_over,
    )
    took_over = first(
        story,
        rf"\[Broker id={survivor}\] Handled LeaderAndIsr .* partition "
        rf"{p0}: became leader with leader epoch 1",
        sent,
    )
    back = first(
        story,
        rf"\[Broker id={victim}\] Handled LeaderAndIsr .* partition {p0}: "
        rf"became follower of broker {survivor} with leader epoch 1",
        took_over,
    )
    first(
        story,
        rf"\[Broker id={survivor}\] Expanded ISR of partition {p0} from \[.*\] to "
        rf"\[.*{victim}.*\]",
        back,
    )

    others = merger(cluster, "--topic", topic, "--partitions", "1")
    assert others and all(f"{topic}-1" in line and f"{topic}-0" not in line for line in others)

    late = merger(cluster, "--topic", topic, "--start-time", before_kill)
    assert late and all(line[1:24] >= before_kill for line in late)
    assert not any("from NewPartition" in line for line in late)
    assert len(late) < len(merger(cluster, "--topic", topic))
