"""One fault-suite run: a cluster on test hosts, a topic (RF=3, min ISR 2), the workload, a
number of seeded random faults one after another, then the history checked.

`run_suite` is what the short test (tests/faults) and the long run (bench/bench_faults.py)
call; `SuiteResult.table` prints faults per kind, records acknowledged, lost, duplicated,
reordered, and recovery per fault kind (seconds until produce succeeded again on every
partition, median and max) beside the timeouts that bound it.

Invariants: whatever happens, the workload's processes, the cluster and the hosts are torn
down before `run_suite` returns or raises; the seed and the per-fault log (kind, target,
wall-clock ms) are kept in the result, so an anomaly can be replayed and matched to logs.
"""

from __future__ import annotations

import bisect
import contextlib
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from riverlog.testing.fault_cluster import FaultCluster
from riverlog.testing.history import Report, check
from riverlog.testing.hosts import Hosts, Loopback, NetnsHosts
from riverlog.testing.nemesis import Fault, Nemesis, kinds_for
from riverlog.testing.workload import Workload

PARTITIONS = 3


@dataclass
class SuiteResult:
    seed: int
    settings: dict[str, str]
    faults: list[Fault] = field(default_factory=list)
    report: Report = field(default_factory=Report)
    elapsed_s: float = 0.0
    limits: list[str] = field(default_factory=list)
    """Fault kinds these hosts cannot inject (and why)."""
    notes: list[str] = field(default_factory=list)
    """What stopped the run short (a cluster that did not heal, a final read that failed)."""

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.notes

    def table(self) -> str:
        r = self.report
        lines = [
            f"seed {self.seed}: {len(self.faults)} faults in {self.elapsed_s:.0f} s "
            f"(zookeeper.session.timeout.ms={self.settings['zookeeper.session.timeout.ms']}, "
            f"replica.lag.time.max.ms={self.settings['replica.lag.time.max.ms']})",
            f"records acknowledged {r.acknowledged}, attempted {r.attempted}, stored {r.read}; "
            f"lost {len(r.of('lost'))}, duplicated {len(r.of('duplicate'))}, "
            f"reordered {len(r.of('reordered'))}",
            f"{'fault kind':<30}{'count':>6}{'recovery median s':>19}{'max s':>8}"
            f"{'not recovered':>15}{'heal->healthy max s':>21}",
        ]
        by_kind: dict[str, list[Fault]] = {}
        for f in self.faults:
            by_kind.setdefault(f.kind, []).append(f)
        for kind, faults in sorted(by_kind.items()):
            times = [f.recovery_s for f in faults if f.recovery_s is not None]
            healed = [f.healed_s for f in faults if f.healed_s is not None]
            lines.append(
                f"{kind:<30}{len(faults):>6}"
                f"{statistics.median(times) if times else float('nan'):>19.2f}"
                f"{max(times) if times else float('nan'):>8.2f}"
                f"{len(faults) - len(times):>15}{max(healed) if healed else float('nan'):>22.2f}"
            )
        lines += [f"not injected: {limit}" for limit in self.limits]
        lines += [f"NOTE: {note}" for note in self.notes]
        for f in self.faults:
            lines += [f"while healing {f.kind} on {f.target} at {f.at_ms}: {t}" for t in f.trouble]
        counts = Counter(a.kind for a in r.anomalies)
        lines.append("anomalies: " + (", ".join(f"{k} {n}" for k, n in counts.items()) or "none"))
        for a in r.anomalies[:20]:
            lines.append(f"  {a.kind}: {a.detail}")
        return "\n".join(lines)


def recovery_s(acks: dict[int, list[int]], at_ms: int) -> float | None:
    """Seconds from `at_ms` until every partition had an ack again (the first ack more than
    100 ms after the fault, so that answers already on their way do not count); None if some
    partition had none."""
    firsts = []
    for p in range(PARTITIONS):
        times = acks.get(p, [])
        i = bisect.bisect_left(times, at_ms + 100)
        if i == len(times):
            return None
        firsts.append(times[i])
    return (max(firsts) - at_ms) / 1000


def run_suite(
    directory: Path,
    *,
    faults: int,
    seed: int,
    netns: bool = False,
    disk_mb: int | None = None,
    settings: dict[str, str] | None = None,
    topic_configs: dict[str, str] | None = None,
    idempotent: bool = True,
    throughput: int = 200,
    kinds: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    deadline: float | None = None,
    stop: threading.Event | None = None,
) -> SuiteResult:
    """Run `faults` seeded random faults against a fresh cluster (fewer if the
    `time.monotonic()` `deadline` comes first, or `stop` is set: the fault under way is
    healed, then the history is read and checked); the checked result."""
    hosts: Hosts = NetnsHosts() if netns else Loopback()

    def run() -> SuiteResult:
        return _run(
            directory,
            hosts,
            faults,
            seed,
            disk_mb,
            settings,
            topic_configs,
            idempotent,
            throughput,
            kinds,
            progress,
            deadline,
            stop,
        )

    try:
        if not isinstance(hosts, NetnsHosts):
            result = run()
            result.limits.append("network faults: loopback hosts (run with netns=True)")
            return result
        result = hosts.call_in("client", run)
        if not hosts.netem():
            result.limits.append("delay and reordering: this kernel has no netem qdisc")
        return result
    finally:
        hosts.close()


def _run(
    directory: Path,
    hosts: Hosts,
    faults: int,
    seed: int,
    disk_mb: int | None,
    settings: dict[str, str] | None,
    topic_configs: dict[str, str] | None,
    idempotent: bool,
    throughput: int,
    kinds: tuple[str, ...] | None,
    progress: Callable[[str], None] | None,
    deadline: float | None,
    stop: threading.Event | None,
) -> SuiteResult:
    started = time.monotonic()
    cluster = FaultCluster(directory, hosts, settings=settings, disk_mb=disk_mb)
    result = SuiteResult(seed, cluster.settings)
    workload: Workload | None = None
    try:
        cluster.start()
        topic = f"faults-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(
            topic, PARTITIONS, {"min.insync.replicas": "2", **(topic_configs or {})}
        )
        workload = Workload(
            cluster.bootstrap_servers,
            topic,
            directory / "workload",
            idempotent=idempotent,
            throughput=throughput,
        )
        workload.start()
        nemesis = Nemesis(cluster, topic, seed)
        choices = kinds or kinds_for(cluster)
        live = workload

        def healthy(since_ms: int) -> bool:
            acks = live.last_acks()
            flowing = len(acks) == PARTITIONS and min(acks.values()) >= since_ms
            return flowing and cluster.isr_full(topic)

        for i in range(faults):
            if deadline is not None and time.monotonic() > deadline:
                break
            if stop is not None and stop.is_set():
                break
            kind = nemesis.rng.choice(choices)
            try:
                fault = nemesis.run(kind, healthy)
            except Exception as e:  # a harness failure still gets its history checked
                result.notes.append(f"the nemesis failed injecting {kind} (fault {i + 1}): {e!r}")
                with contextlib.suppress(Exception):
                    nemesis.heal()
                break
            result.faults.append(fault)
            if progress is not None:
                healed = (
                    "NOT healed" if fault.healed_s is None else f"healed in {fault.healed_s:.1f} s"
                )
                progress(
                    f"fault {i + 1}/{faults}: {fault.kind} on {fault.target} at "
                    f"{fault.at_ms}, held {fault.hold_s:.1f} s, {healed}"
                )
            if fault.healed_s is None:
                last = live.last_acks()
                result.notes.append(
                    f"the cluster did not heal within 120 s after {fault.kind} on "
                    f"{fault.target} at {fault.at_ms} (seed {seed}, fault {i + 1}): stopped "
                    f"there; last acks per partition (ms): {last}; {cluster.last_unhealthy}; "
                    f"per broker: {cluster.views(topic)}"
                )
                break
        try:
            workload.stop(PARTITIONS)
        except Exception as e:  # whatever stopped the read is the finding
            result.notes.append(f"the final read failed: {e!r}")
            return result
        acks = workload.ack_times()
        for fault in result.faults:
            fault.recovery_s = recovery_s(acks, fault.at_ms)
        result.report = check(workload.history())
    finally:
        if workload is not None:
            workload.close()
        cluster.close()
        result.elapsed_s = time.monotonic() - started
    return result
