"""The nemesis: fault kinds, each an inject-hold-heal step against a `FaultCluster`, chosen at
random from a seed so that a run (and an anomaly it finds) can be replayed.

Process and ZooKeeper kinds work on any hosts; `disk-full` needs tmpfs data dirs; the
network kinds need `NetnsHosts`. A fault's target is chosen from what the cluster says at the
time (the leader of a random partition, the controller, a follower), its hold time from the
seeded generator within bounds set by `zookeeper.session.timeout.ms` and
`replica.lag.time.max.ms`. `heal` undoes every fault kind at once (thaw, restart, network
rules gone), so the next fault starts from a whole cluster.

Invariants: `inject` returns only after the fault is in place and records when (wall-clock
ms, the tools' clock); after `heal` no process started by the cluster is frozen or down.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from riverlog.testing.fault_cluster import FaultCluster
from riverlog.testing.hosts import NetnsHosts

_T = TypeVar("_T")

PROCESS_KINDS = (
    "kill-leader",
    "kill-controller",
    "freeze-leader",
    "shutdown-leader",
    "shutdown-follower",
    "zk-kill",
    "zk-freeze",
)
DISK_KINDS = ("disk-full",)
NETWORK_KINDS = (
    "partition-leader-followers",
    "partition-leader-zk",
    "partition-leader-clients",
    "isolate-controller",
    "one-way-leader-to-followers",
    "loss",
)


@dataclass
class Fault:
    kind: str
    target: str
    at_ms: int
    hold_s: float
    healed_s: float | None = None
    """Seconds from heal until every partition had a full ISR and took records again (None:
    not within the deadline — the cluster is stuck)."""
    recovery_s: float | None = None
    """Seconds from injection until produce succeeded again on every partition."""
    trouble: list[str] = field(default_factory=list)
    """What went wrong while healing (a broker that exited by itself or failed to start)."""


def kinds_for(cluster: FaultCluster) -> tuple[str, ...]:
    kinds: tuple[str, ...] = PROCESS_KINDS
    if cluster.mounted:
        kinds += DISK_KINDS
    if isinstance(cluster.hosts, NetnsHosts):
        kinds += NETWORK_KINDS
    return kinds


class Nemesis:
    def __init__(self, cluster: FaultCluster, topic: str, seed: int) -> None:
        self.cluster = cluster
        self.topic = topic
        self.rng = random.Random(seed)
        settings = cluster.settings
        self.session_s = int(settings["zookeeper.session.timeout.ms"]) / 1000
        self.lag_s = int(settings["replica.lag.time.max.ms"]) / 1000

    def _once(self, read: Callable[[], _T], ok: Callable[[_T], bool], what: str) -> _T:
        """`read()`'s first value that is `ok` (polled for up to a minute)."""
        last: list[_T] = []

        def check() -> bool:
            last[:] = [read()]
            return ok(last[0])

        self.cluster.wait_until(check, 60, what)
        return last[0]

    def _leader(self) -> tuple[int, list[int]]:
        """A random partition's leader and its other replicas — among the partitions a
        leader is known for (a broker that has just restarted can answer with leader -1
        until the controller's UpdateMetadata reaches it: long run seed 1608, fault 386)."""
        layout = self._once(
            lambda: {p: v for p, v in self.cluster.layout(self.topic).items() if v[0] >= 0},
            bool,
            "a partition with a known leader",
        )
        leader, replicas, _ = layout[self.rng.choice(sorted(layout))]
        return leader, [r for r in replicas if r != leader]

    def _controller(self) -> int:
        """The controller, once one is known (none for a moment after a failover)."""
        return self._once(
            self.cluster.controller, lambda c: c in self.cluster.brokers, "a known controller"
        )

    def inject(self, kind: str) -> Fault:
        c, rng = self.cluster, self.rng
        hold = rng.uniform(0.5, 1.5)
        action: Callable[[], None]
        if kind in ("kill-leader", "freeze-leader", "shutdown-leader", "disk-full"):
            target, _ = self._leader()
        elif kind == "kill-controller":
            target = self._controller()
        elif kind == "shutdown-follower":
            target = rng.choice(self._leader()[1])
        if kind in ("kill-leader", "kill-controller"):
            action = lambda: c.kill(target)  # noqa: E731
        elif kind == "freeze-leader":
            hold = rng.uniform(0.5, 2.5 * self.lag_s)
            action = lambda: c.freeze(target)  # noqa: E731
        elif kind in ("shutdown-leader", "shutdown-follower"):
            action = lambda: c.terminate(target)  # noqa: E731
        elif kind == "disk-full":
            hold = rng.uniform(1.0, 3.0)
            action = lambda: self._fill(target)  # noqa: E731
        elif kind == "zk-kill":
            hold = rng.uniform(0.5, 2 * self.session_s)
            action = c.kill_zookeeper
        elif kind == "zk-freeze":
            hold = rng.uniform(0.5 * self.session_s, 2 * self.session_s)
            action = c.freeze_zookeeper
        else:
            hold = rng.uniform(1.0, 2.5 * self.session_s)
            label, action = self._network(kind)
        if kind.startswith("zk"):
            label = "zookeeper"
        elif kind not in NETWORK_KINDS:
            label = f"broker {target}"
        at_ms = int(time.time() * 1000)
        action()
        return Fault(kind, label, at_ms, hold)

    def _fill(self, broker_id: int) -> None:
        self.cluster.fill_disk(broker_id)

    def _network(self, kind: str) -> tuple[str, Callable[[], None]]:
        """What the network fault `kind` cuts off (a label) and how."""
        hosts = self.cluster.hosts
        assert isinstance(hosts, NetnsHosts), kind
        if kind == "loss":
            broker = self.rng.choice(sorted(self.cluster.brokers))
            percent = self.rng.choice((10, 30, 60))
            return f"broker {broker} {percent}%", lambda: hosts.loss(f"b{broker}", percent)
        if kind == "isolate-controller":
            controller = self._controller()
            return f"broker {controller}", lambda: hosts.isolate(f"b{controller}")
        leader, followers = self._leader()
        node = f"b{leader}"
        if kind == "partition-leader-zk":
            return f"broker {leader} | zookeeper", lambda: hosts.partition(node, "zk")
        if kind == "partition-leader-clients":
            return f"broker {leader} | clients", lambda: hosts.partition(node, "client")
        one_way = kind == "one-way-leader-to-followers"

        def cut() -> None:
            for f in followers:
                hosts.partition(node, f"b{f}", one_way=one_way)

        return f"broker {leader} {'->' if one_way else '|'} {followers}", cut

    def heal(self) -> list[str]:
        c = self.cluster
        if isinstance(c.hosts, NetnsHosts):
            c.hosts.heal()
        for broker_id in c.brokers:
            if c.mounted:
                c.release_disk(broker_id)
            c.thaw(broker_id)
        c.thaw_zookeeper()
        c.restart_zookeeper()
        return c.restart_stopped()

    def run(
        self, kind: str, healthy: Callable[[int], bool], healthy_timeout_s: float = 120.0
    ) -> Fault:
        """Inject, hold, heal; then wait until `healthy(heal_ms)` (whole ISRs, produce
        succeeding again since the heal)."""
        fault = self.inject(kind)
        time.sleep(fault.hold_s)  # the fault's length, not a synchronisation
        fault.trouble = self.heal()
        heal_ms = int(time.time() * 1000)
        try:
            fault.healed_s = self.cluster.wait_until(
                lambda: healthy(heal_ms), healthy_timeout_s, "whole again"
            )
        except TimeoutError:
            fault.healed_s = None
        return fault
