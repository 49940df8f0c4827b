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

import statistics
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
            f"{'not recovered':>15}{'heal->ISR full max s':>22}",
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
        counts = Counter(a.kind for a in r.anomalies)
        lines.append("anomalies: " + (", ".join(f"{k} {n}" for k, n in counts.items()) or "none"))
        for a in r.anomalies[:20]:
            lines.append(f"  {a.kind}: {a.detail}")
        stuck = [f for f in self.faults if f.healed_s is None]
        for f in stuck:
            lines.append(f"  not healed within the deadline: {f.kind} on {f.target} at {f.at_ms}")
        return "\n".join(lines)


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
) -> SuiteResult:
    """Run `faults` seeded random faults against a fresh cluster (fewer if the
    `time.monotonic()` `deadline` comes first); the checked result."""
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
        )

    try:
        if isinstance(hosts, NetnsHosts):
            return hosts.call_in("client", run)
        return run()
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
        for i in range(faults):
            if deadline is not None and time.monotonic() > deadline:
                break
            fault = nemesis.run(nemesis.rng.choice(choices))
            result.faults.append(fault)
            if progress is not None:
                progress(
                    f"fault {i + 1}/{faults}: {fault.kind} on {fault.target}, held "
                    f"{fault.hold_s:.1f} s, healed in {fault.healed_s} s"
                )
        cluster.wait_until(lambda: cluster.isr_full(topic), 120, "ISRs full before the read")
        workload.stop(PARTITIONS)
        for fault in result.faults:
            firsts = workload.acks_since(fault.at_ms + 100)
            if len(firsts) == PARTITIONS:
                fault.recovery_s = (max(firsts.values()) - fault.at_ms) / 1000
        result.report = check(workload.history())
    finally:
        if workload is not None:
            workload.close()
        cluster.close()
        result.elapsed_s = time.monotonic() - started
    return result
