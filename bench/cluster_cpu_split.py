"""Where bench_cluster's brokers spend CPU: user vs system time, context switches and
requests per MiB, for each broker of the RF=3 cluster and for the lone broker.

Runs bench_cluster.py's produce load (librdkafka, 1 KiB records, acks=all, linger 5 ms,
1 MiB batches; idempotent and not) against a real 3-broker cluster and a lone broker,
alternated, and reads for every broker around each run: CPU time in nanoseconds (the sum of
its threads' `/proc/PID/task/*/schedstat`; threads that ended meanwhile are missed), the
user/system split from `/proc/PID/stat` (10 ms ticks), `/proc/PID/status` voluntary and
involuntary context switches, the Prometheus endpoint's
`kafka_network_requestmetrics_requests_total` (Produce and Fetch answers: on the RF=3 run the
Fetches are the followers') and system calls counted by `perf stat` on their tracepoints
(epoll_wait returns are the event loop's wake-ups). Prints per acknowledged MiB. With
`--perf DIR`, also `perf record -e cpu-clock` of the brokers of each run (then
`perf report -i FILE --no-children --sort dso`). Wall-clock dependent (timing sets batch and
fetch sizes, and 2 cores shared by 4 busy processes cost more per byte than by 2): compare
runs made together, e.g. this tree and another alternated with PYTHONPATH.

    python bench/cluster_cpu_split.py --mib 128 --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import bench_cluster
from bench_cluster import create, produce_acks_all, warm_memory
from bench_harness import CLOCK_TICKS, broker_process
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from riverlog.devcluster import BrokerProcess, ZooKeeperServer, free_port

PERF = shutil.which("perf")
"""Without it (Debian's linux-perf), no system-call counts."""
SYSCALLS = [
    f"syscalls:sys_enter_{name}"
    for name in ("epoll_wait", "recvfrom", "sendto", "sendfile64", "write", "setsockopt")
]
_REQUESTS = re.compile(
    r'^kafka_network_requestmetrics_requests_total\{request="(\w+)"\} (\S+)', re.M
)


def sample(pid: int, metrics_port: int) -> dict[str, float]:
    """A broker's counters so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = Path(f"/proc/{pid}/status").read_text()
    counts = {
        "cpu_s": sum(
            int(task.joinpath("schedstat").read_text().split()[0])
            for task in Path(f"/proc/{pid}/task").iterdir()
        )
        / 1e9,
        "user_s": int(fields[11]) / CLOCK_TICKS,
        "sys_s": int(fields[12]) / CLOCK_TICKS,
        "vcsw": float(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1)),  # type: ignore[union-attr]
        "ivcsw": float(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1)),  # type: ignore[union-attr]
    }
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for name, value in _REQUESTS.findall(text):
        if name in ("Produce", "Fetch"):
            counts[name] = float(value)
    return counts


def measure(
    bootstrap: str,
    topic: str,
    brokers: dict[str, tuple[int, int]],
    idempotent: bool,
    perf: Path | None,
) -> None:
    warm_memory()
    recording = None
    if perf is not None:
        pids = ",".join(str(pid) for pid, _ in brokers.values())
        path = perf / f"perf.{topic}.{'idem' if idempotent else 'plain'}.{time.time():.0f}"
        recording = subprocess.Popen(
            [
                PERF or "perf",
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-F",
                "999",
                "-o",
                str(path),
                "-p",
                pids,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # attached
    counting = {
        name: subprocess.Popen(
            [PERF, "stat", "-x", ",", "-e", ",".join(SYSCALLS), "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (pid, _) in brokers.items()
        if PERF is not None
    }
    time.sleep(0.5)  # attached
    before = {name: sample(pid, port) for name, (pid, port) in brokers.items()}
    mb_s = produce_acks_all(bootstrap, topic, 3, idempotent)
    after = {name: sample(pid, port) for name, (pid, port) in brokers.items()}
    for name, proc in counting.items():
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        for row in err.splitlines():
            fields = row.split(",")
            if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_"):
                after[name][fields[2].removeprefix("syscalls:sys_enter_")] = float(fields[0])
    if recording is not None:
        recording.send_signal(signal.SIGINT)
        recording.wait(60)
    mib = bench_cluster.PRODUCE_BYTES / (1 << 20)
    total = {k: 0.0 for k in after[next(iter(after))]}
    print(f"  {topic} idempotent={idempotent}: {mb_s:.1f} MB/s")
    for name in brokers:
        delta = {k: after[name][k] - before[name].get(k, 0.0) for k in after[name]}
        for k, v in delta.items():
            total[k] = total.get(k, 0.0) + v
        print(f"    {name:9s} " + line(delta, mib))
    print(f"    {'sum':9s} " + line(total, mib))


def line(delta: dict[str, float], mib: float) -> str:
    gib = mib / 1024
    return (
        f"CPU {delta['cpu_s'] / gib:5.2f} (user {delta['user_s'] / gib:5.2f} sys "
        f"{delta['sys_s'] / gib:5.2f}) s/GiB; per MiB: "
        f"vcsw {delta['vcsw'] / mib:6.1f} ivcsw {delta['ivcsw'] / mib:5.1f} "
        f"produce {delta.get('Produce', 0) / mib:5.2f} fetch {delta.get('Fetch', 0) / mib:5.2f}; "
        + " ".join(
            f"{name} {delta[name] / mib:.1f}"
            for name in ("epoll_wait", "recvfrom", "sendto", "sendfile64", "write", "setsockopt")
            if name in delta
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--perf", type=Path, default=None, help="perf record into this directory")
    args = parser.parse_args()
    bench_cluster.PRODUCE_BYTES = args.mib << 20
    with tempfile.TemporaryDirectory(prefix="riverlog-cpu-split-") as tmp:
        directory = Path(tmp)
        zookeeper = ZooKeeperServer(directory / "zookeeper").start()
        ports = {i: free_port() for i in (1, 2, 3, 4)}
        cluster = {
            i: BrokerProcess(
                i,
                directory,
                zookeeper.connect,
                {"metrics.listener": f"http://127.0.0.1:{ports[i]}"},
            )
            for i in (1, 2, 3)
        }
        try:
            for b in cluster.values():
                b.start(60)
            bootstrap = ",".join(b.address for b in cluster.values())
            create(
                bootstrap, NewTopic("rf3", 3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
            )
            rf3 = {f"broker {i}": (b.proc.pid, ports[i]) for i, b in cluster.items() if b.proc}
            with broker_process(f"metrics.listener=http://127.0.0.1:{ports[4]}") as (single, pid):
                create(single, NewTopic("single", 3, 1))
                for round_ in range(args.rounds):
                    print(f"round {round_ + 1}")
                    for idempotent in (True, False):
                        measure(single, "single", {"lone": (pid, ports[4])}, idempotent, args.perf)
                        measure(bootstrap, "rf3", rf3, idempotent, args.perf)
        finally:
            for b in cluster.values():
                with contextlib.suppress(Exception):
                    b.stop(60)
            zookeeper.stop()


if __name__ == "__main__":
    main()
