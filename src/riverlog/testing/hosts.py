"""Test hosts for the fault suite: where each node (ZooKeeper, brokers, the clients) runs.

`Loopback`: every node on 127.0.0.1 with a free port of its own; no network faults.

`NetnsHosts`: every node in a network namespace of its own, all joined by veth pairs to a
bridge that lives in a namespace of its own too (the "hub"), so nothing is added to the
machine's own network: addresses 10.213.0.N/24 exist only inside these namespaces, and no
packet leaves them. A node's processes run under `ip netns exec NAME`; the test's own client
code runs in the "client" namespace (`call_in`, a thread that entered it with setns(2); the
processes that thread starts inherit it). Network faults are nftables rules in the nodes'
namespaces: `partition` (both ways, or one way), `loss` (a random share of packets dropped both
ways), `heal` (all rules gone). Delay and reordering need the kernel's netem qdisc; `netem()`
says whether this kernel has it.

Invariants: `close` deletes every namespace this object made (their veths and rules go with
them) and is safe after any failure; names carry a per-object prefix, so two runs never touch
each other's namespaces.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

from riverlog.devcluster import free_port

_T = TypeVar("_T")
CLONE_NEWNET = 0x40000000
NODES = ("zk", "b1", "b2", "b3", "client")
PORTS = {"zk": 2181}
"""Fixed ports inside namespaces (brokers 9092)."""


class Hosts(Protocol):
    def place(self, node: str) -> tuple[str, list[str], int]:
        """The node's address, the command prefix that runs a process there, its port."""
        ...

    def close(self) -> None: ...


class Loopback:
    def place(self, node: str) -> tuple[str, list[str], int]:
        return "127.0.0.1", [], free_port()

    def close(self) -> None:
        pass


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"{' '.join(args)}: {done.stderr.strip()}")


def netns_unavailable() -> str | None:
    """Why network-namespace hosts cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) for ip netns"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian packages iproute2, nftables)"
    probe = f"rlprobe-{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe")
    except OSError as e:
        return f"network namespaces or nftables refused: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


class NetnsHosts:
    def __init__(self, nodes: tuple[str, ...] = NODES) -> None:
        self.prefix = f"rlf{uuid.uuid4().hex[:6]}"
        self.hub = f"{self.prefix}-hub"
        self.addresses = {node: f"10.213.0.{i + 2}" for i, node in enumerate(nodes)}
        self.made: list[str] = []
        try:
            self._build(nodes)
        except BaseException:
            self.close()
            raise

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def _build(self, nodes: tuple[str, ...]) -> None:
        _run("ip", "netns", "add", self.hub)
        self.made.append(self.hub)
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for i, node in enumerate(nodes):
            ns = self.ns(node)
            _run("ip", "netns", "add", ns)
            self.made.append(ns)
            _run(
                "ip",
                "-n",
                self.hub,
                "link",
                "add",
                f"v{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            )
            _run("ip", "-n", self.hub, "link", "set", f"v{i}", "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.addresses[node]}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            nft = (
                "table inet rlfault {\n"
                " chain input { type filter hook input priority 0; }\n"
                " chain output { type filter hook output priority 0; }\n}\n"
            )
            done = subprocess.run(
                ["ip", "netns", "exec", ns, "nft", "-f", "-"],
                input=nft,
                capture_output=True,
                text=True,
                timeout=30,
            )
            if done.returncode != 0:
                raise OSError(f"nft in {ns}: {done.stderr.strip()}")

    def place(self, node: str) -> tuple[str, list[str], int]:
        return self.addresses[node], ["ip", "netns", "exec", self.ns(node)], PORTS.get(node, 9092)

    def _nft(self, node: str, rule: str) -> None:
        _run("ip", "netns", "exec", self.ns(node), "nft", *rule.split())

    def partition(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Drop what `a` sends to `b` (and, unless `one_way`, what `b` sends to `a`)."""
        self._nft(b, f"add rule inet rlfault input ip saddr {self.addresses[a]} drop")
        if not one_way:
            self._nft(a, f"add rule inet rlfault input ip saddr {self.addresses[b]} drop")

    def isolate(self, node: str) -> None:
        for other in self.addresses:
            if other != node:
                self.partition(node, other)

    def loss(self, node: str, percent: int) -> None:
        for chain in ("input", "output"):
            self._nft(node, f"add rule inet rlfault {chain} numgen random mod 100 < {percent} drop")

    def heal(self) -> None:
        for node in self.addresses:
            for chain in ("input", "output"):
                self._nft(node, f"flush chain inet rlfault {chain}")

    def netem(self) -> bool:
        """Whether this kernel has the netem qdisc (delay, reordering)."""
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.ns("client"),
                "tc",
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
            capture_output=True,
            timeout=30,
        )
        if done.returncode == 0:
            _run(
                "ip",
                "netns",
                "exec",
                self.ns("client"),
                "tc",
                "qdisc",
                "del",
                "dev",
                "eth0",
                "root",
            )
        return done.returncode == 0

    def call_in(self, node: str, fn: Callable[[], _T]) -> _T:
        """Run `fn` on a thread that entered `node`'s network namespace; its result."""
        results: list[_T] = []
        errors: list[BaseException] = []

        def enter_and_run() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{self.ns(node)}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
                results.append(fn())
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=enter_and_run, name=f"netns-{node}")
        thread.start()
        thread.join()
        if errors:
            raise errors[0]
        return results[0]

    def close(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made.clear()
