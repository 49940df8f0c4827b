"""The fault suite's long mode: many seeded random faults against 3 brokers (RF=3,
min.insync.replicas=2, acks=all, idempotent producers, a consumer group), then the history
checker. Prints faults injected per kind, records acknowledged / lost / duplicated /
reordered, and recovery time per fault kind (median and max) beside
`zookeeper.session.timeout.ms` and `replica.lag.time.max.ms`.

    python bench/bench_faults.py --faults 1000 --seed 7 [--netns] [--disk-mb 64]
        [--minutes 30] [--plain] [--kinds kill-leader,zk-freeze]
        [--override zookeeper.session.timeout.ms=2000 --override replica.lag.time.max.ms=2000]

Runs as root for --netns (each node in its own network namespace: partitions, loss) and
--disk-mb (each log dir a tmpfs of that size: disk-full faults). Without them it injects the
process and ZooKeeper faults on loopback. `--minutes` stops injecting after that long (the
run still checks what it has), as does SIGINT or SIGTERM (the fault under way is healed, then
the history read and checked); the brokers' logs and the tools' event lines stay in --keep.
A run with the same seed and kinds replays the same choices (targets follow the cluster).
Exit status 1 if the checker found anomalies.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_harness import add_override_argument

from riverlog.testing.hosts import netns_unavailable
from riverlog.testing.suite import run_suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=12, help="(12: ~2 minutes, for ./dev bench)")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--netns", action="store_true", help="nodes in network namespaces")
    parser.add_argument("--disk-mb", type=int, help="log dirs on tmpfs of this size")
    parser.add_argument("--minutes", type=float, help="stop injecting after this long")
    parser.add_argument("--plain", action="store_true", help="non-idempotent producers")
    parser.add_argument("--throughput", type=int, default=300, help="records/s per producer")
    parser.add_argument("--kinds", help="comma-separated fault kinds (default: all possible)")
    parser.add_argument("--keep", type=Path, help="keep logs and histories here")
    add_override_argument(parser, "zookeeper.session.timeout.ms=2000")
    args = parser.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override if "=" in o)
    if len(overrides) != len(args.override):
        parser.error("--override takes KEY=VALUE")
    if args.netns and (reason := netns_unavailable()):
        print(f"--netns not possible here: {reason}", file=sys.stderr)
        return 2
    directory = args.keep or Path(tempfile.mkdtemp(prefix="riverlog-faults-"))
    directory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
    print(f"logs and histories in {directory}", flush=True)
    stop = threading.Event()

    def stopping(signum: int, _frame: object) -> None:
        if not stop.is_set():
            print(f"{signal.Signals(signum).name}: no more faults; checking", flush=True)
        stop.set()

    signal.signal(signal.SIGINT, stopping)
    signal.signal(signal.SIGTERM, stopping)
    start_cpu = _cpu_s()
    result = run_suite(
        directory,
        faults=args.faults,
        seed=args.seed,
        netns=args.netns,
        disk_mb=args.disk_mb,
        settings=overrides or None,
        idempotent=not args.plain,
        throughput=args.throughput,
        kinds=tuple(args.kinds.split(",")) if args.kinds else None,
        progress=lambda line: print(line, flush=True),
        deadline=deadline,
        stop=stop,
    )
    print(result.table())
    cpu = _cpu_s() - start_cpu
    acked = max(result.report.acknowledged, 1)
    print(
        f"CPU {cpu:.0f} s (all processes of the run), {cpu / acked * 1e6:.0f} µs per "
        f"acknowledged record"
    )
    return 0 if result.ok else 1


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
