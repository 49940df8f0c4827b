"""`riverlog cluster up|down`: a ZooKeeper and N brokers on loopback, for development;
`riverlog cluster describe`: any cluster's brokers, controller and health
(`cli/cluster_view.py`).

    riverlog cluster up [--brokers 3] [--dir DIR] [--port 9092] [--zookeeper-port 2181]
                        [--override key=value ...] [--security]
    riverlog cluster down [--dir DIR]
    riverlog cluster stop|start|restart --broker N [--dir DIR]
    riverlog cluster describe --bootstrap-server HOST:PORT

`up` starts Debian's ZooKeeper and brokers 1..N (ports PORT, PORT+1, ...; 0 picks free
ports) as background processes with their data, logs and `cluster.json` (their PIDs and
ports) under DIR, waits until every broker serves, and prints the bootstrap address on
standard output — `export BOOTSTRAP=$(riverlog cluster up)` — and the rest on standard error.
Starting again on the same DIR reuses its data. `down` stops the brokers with SIGTERM (a
controlled shutdown each), then ZooKeeper, by the PIDs recorded, and keeps the data.
`stop --broker N` stops one broker the same way, `start --broker N` starts it again on its
port, data and settings (waiting until it serves), `restart --broker N` does both; the new
PID goes into `cluster.json`, so `down` stops a broker started again this way too.
`--security` makes it a secured cluster (SASL_SSL, ACLs; `cli/secure_cluster.py`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import signal
import sys
import tempfile
from pathlib import Path

from riverlog.cli import cluster_view, secure_cluster
from riverlog.devcluster import (
    ZOOKEEPER_MAIN,
    BrokerProcess,
    ZooKeeperServer,
    pid_alive,
    port_in_use,
    signal_pid,
    wait_gone,
)

STATE_FILE = "cluster.json"
BROKER_MARKER = "riverlog"
STOP_TIMEOUT_S = 60.0


def default_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"riverlog-cluster-{getpass.getuser()}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(
        dest="cluster_command", required=True, metavar="up|down|stop|start|restart|describe"
    )
    up = sub.add_parser("up", help="start ZooKeeper and N brokers on loopback")
    up.add_argument("--brokers", type=int, default=3, metavar="N", help="how many (default 3)")
    up.add_argument("--port", type=int, default=9092, help="first broker port (0: free ports)")
    up.add_argument("--zookeeper-port", type=int, default=2181, help="(0: a free port)")
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for every broker (repeatable)",
    )
    up.add_argument(
        "--security",
        action="store_true",
        help="SASL_SSL listeners, SCRAM logins, ACLs, a throwaway CA",
    )
    down = sub.add_parser("down", help="stop the cluster that `up` started")
    for p in (up, down):
        p.add_argument(
            "--dir",
            type=Path,
            default=default_dir(),
            help="data, logs and cluster.json (default %(default)s)",
        )
    for name, text in (
        ("stop", "stop one broker (a controlled shutdown)"),
        ("start", "start a stopped broker again"),
        ("restart", "stop one broker, then start it again"),
    ):
        one = sub.add_parser(name, help=text)
        one.add_argument(
            "--broker",
            type=int,
            required=True,
            metavar="N",
            help="the broker's id (1..N as `up` numbered them)",
        )
        one.add_argument(
            "--dir",
            type=Path,
            default=default_dir(),
            help="data, logs and cluster.json (default %(default)s)",
        )
    describe = sub.add_parser(
        "describe",
        help="brokers, controller, under-replicated and offline partitions, leader balance",
    )
    cluster_view.add_arguments(describe)


def _running(state: dict[str, object]) -> list[str]:
    out = []
    zk = state.get("zookeeper")
    if isinstance(zk, dict) and pid_alive(int(zk["pid"]), ZOOKEEPER_MAIN):
        out.append(f"ZooKeeper (pid {zk['pid']})")
    brokers = state.get("brokers")
    if isinstance(brokers, dict):
        for broker_id, b in brokers.items():
            if pid_alive(int(b["pid"]), BROKER_MARKER):
                out.append(f"broker {broker_id} (pid {b['pid']})")
    return out


def _read_state(directory: Path) -> dict[str, object]:
    try:
        state = json.loads((directory / STATE_FILE).read_text())
    except FileNotFoundError:
        return {}
    return state if isinstance(state, dict) else {}


def _up(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    if args.brokers < 1:
        print("riverlog cluster up: --brokers must be at least 1", file=sys.stderr)
        return 2
    alive = _running(_read_state(directory))
    if alive:
        print(
            f"riverlog cluster up: already running in {directory}: {', '.join(alive)}; "
            "`riverlog cluster down` first",
            file=sys.stderr,
        )
        return 1
    ports = [0 if args.port == 0 else args.port + i for i in range(args.brokers)]
    busy = [p for p in [args.zookeeper_port, *ports] if p and port_in_use(p)]
    if busy:
        print(
            f"riverlog cluster up: ports in use: {busy} (choose --port/--zookeeper-port, "
            "or 0 for free ones)",
            file=sys.stderr,
        )
        return 1
    directory.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperServer(directory / "zookeeper", args.zookeeper_port or None)
    settings = {"offsets.topic.replication.factor": str(min(3, args.brokers))}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            print(
                f"riverlog cluster up: --override expects key=value, got {item!r}", file=sys.stderr
            )
            return 2
        settings[key.strip()] = value.strip()
    brokers = [
        BrokerProcess(i + 1, directory, zookeeper.connect, settings, ports[i] or None)
        for i in range(args.brokers)
    ]
    try:
        zookeeper.start(detached=True)
        print(f"ZooKeeper {zookeeper.connect} (pid {_pid(zookeeper)})", file=sys.stderr)
        if args.security:
            client = secure_cluster.prepare(directory, zookeeper.connect, brokers)
            print(
                f"secured: SASL_SSL, SCRAM-SHA-512 login and CA in {client} "
                "(tools: --command-config)",
                file=sys.stderr,
            )
        for b in brokers:
            b.start(60, detached=True)
            print(
                f"broker {b.broker_id} {b.address} (pid {_pid(b)}), log {b.log_file}",
                file=sys.stderr,
            )
    except RuntimeError as e:
        print(f"riverlog cluster up: {e}; stopping what started", file=sys.stderr)
        for b in brokers:
            if b.proc is not None:
                b.kill()
        zookeeper.stop()
        return 1
    state = {
        "zookeeper": {"pid": _pid(zookeeper), "port": zookeeper.port, "connect": zookeeper.connect},
        "settings": settings,
        "brokers": {str(b.broker_id): {"pid": _pid(b), "port": b.port} for b in brokers},
    }
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    print(",".join(b.address for b in brokers))
    return 0


def _pid(process: ZooKeeperServer | BrokerProcess) -> int:
    assert process.proc is not None
    return process.proc.pid


def _down(args: argparse.Namespace) -> int:
    state = _read_state(args.dir)
    if not state:
        print(f"riverlog cluster down: no cluster in {args.dir}", file=sys.stderr)
        return 1
    failed = False
    brokers = state.get("brokers")
    pids = [int(b["pid"]) for b in brokers.values()] if isinstance(brokers, dict) else []
    stopping = [pid for pid in pids if signal_pid(pid, BROKER_MARKER, signal.SIGTERM)]
    for pid in stopping:
        if not wait_gone(pid, BROKER_MARKER, STOP_TIMEOUT_S):
            print(
                f"broker pid {pid} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it",
                file=sys.stderr,
            )
            signal_pid(pid, BROKER_MARKER, signal.SIGKILL)
            failed = True
    zk = state.get("zookeeper")
    if isinstance(zk, dict):
        pid = int(zk["pid"])
        if signal_pid(pid, ZOOKEEPER_MAIN, signal.SIGTERM) and not wait_gone(
            pid, ZOOKEEPER_MAIN, 15
        ):
            signal_pid(pid, ZOOKEEPER_MAIN, signal.SIGKILL)
    (args.dir / STATE_FILE).unlink(missing_ok=True)
    print(
        f"stopped {len(stopping)} broker(s) and ZooKeeper; data kept in {args.dir}", file=sys.stderr
    )
    return 1 if failed else 0


def _stop_one(pid: int, broker_id: int) -> bool:
    """SIGTERM and wait (SIGKILL after STOP_TIMEOUT_S); False if it had to be killed."""
    if not signal_pid(pid, BROKER_MARKER, signal.SIGTERM):
        return True  # not running
    print(f"Waiting for broker {broker_id} (pid {pid}) to shut down ...", file=sys.stderr)
    if wait_gone(pid, BROKER_MARKER, STOP_TIMEOUT_S):
        return True
    print(f"broker pid {pid} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it", file=sys.stderr)
    signal_pid(pid, BROKER_MARKER, signal.SIGKILL)
    return False


def _one_broker(args: argparse.Namespace) -> int:
    """`stop`, `start` or `restart` of one broker of the cluster in --dir."""
    command, broker_id = args.cluster_command, str(args.broker)
    state = _read_state(args.dir)
    brokers = state.get("brokers")
    zk = state.get("zookeeper")
    if not isinstance(brokers, dict) or not isinstance(zk, dict):
        print(f"riverlog cluster {command}: no cluster in {args.dir}", file=sys.stderr)
        return 1
    if broker_id not in brokers:
        print(
            f"riverlog cluster {command}: no broker {broker_id} in {args.dir} (brokers: "
            f"{', '.join(sorted(brokers))})",
            file=sys.stderr,
        )
        return 1
    entry = brokers[broker_id]
    pid = int(entry["pid"])
    alive = pid_alive(pid, BROKER_MARKER)
    if command in ("stop", "restart") and alive and not _stop_one(pid, args.broker):
        return 1
    if command == "stop":
        print(f"stopped broker {broker_id}", file=sys.stderr)
        return 0
    if command == "start" and alive:
        print(
            f"riverlog cluster start: broker {broker_id} is already running (pid {pid})",
            file=sys.stderr,
        )
        return 1
    settings = state.get("settings")
    connect = zk.get("connect") or f"127.0.0.1:{zk['port']}"
    broker = BrokerProcess(
        args.broker,
        args.dir,
        str(connect),
        dict(settings) if isinstance(settings, dict) else {},
        int(entry["port"]),
    )
    print(f"Waiting for broker {broker_id} to serve on {broker.address} ...", file=sys.stderr)
    try:
        broker.start(60, detached=True)
    except RuntimeError as e:
        print(f"riverlog cluster {command}: {e}", file=sys.stderr)
        return 1
    entry["pid"] = _pid(broker)
    (args.dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    print(
        f"broker {broker_id} {broker.address} (pid {entry['pid']}), log {broker.log_file}",
        file=sys.stderr,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.cluster_command == "up":
        return _up(args)
    if args.cluster_command in ("stop", "start", "restart"):
        return _one_broker(args)
    if args.cluster_command == "describe":
        return cluster_view.run(args)
    return _down(args)
