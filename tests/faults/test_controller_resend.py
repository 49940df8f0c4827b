"""A broker cut off from ZooKeeper cannot confirm a new controller, so it refuses that
controller's requests (`server/fencing.py`: STALE_CONTROLLER_EPOCH, "cannot confirm"); the
controller must send them again, or the broker keeps its old view until some later request.

Found by the long run (seed 1605, fault 35, 30% packet loss on broker 3): broker 3's
ZooKeeper connection dropped for a second while broker 1 took over as controller; broker 3
refused the new controller's LeaderAndIsr and UpdateMetadata, nothing resent them, and
broker 3 went on believing itself partition 0's leader (ISR [3, 1, 2]) while the cluster had
moved it to broker 2 with ISR [1, 2] — out of that ISR for good. Here, on test hosts in
network namespaces (root): a follower is cut from ZooKeeper (only from it) until it has
seen the connection go; the controller steps down by a controlled shutdown, so another
broker takes over at once and tells the cut-off one; that one refuses; then the cut heals
well inside the session timeout (no re-registration, which would make the controller send
everything again anyway). The cut-off broker's view must converge with the cluster's.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from riverlog.testing.fault_cluster import FaultCluster
from riverlog.testing.hosts import NetnsHosts, netns_unavailable

NO_NETNS = netns_unavailable()
SETTINGS = {"zookeeper.session.timeout.ms": "9000", "replica.lag.time.max.ms": "3000"}


def _logged(path: Path, text: str, after: int) -> bool:
    return text in path.read_text(errors="replace")[after:]


@pytest.mark.skipif(NO_NETNS is not None, reason=f"no network namespaces: {NO_NETNS}")
@pytest.mark.timeout(240)
def test_a_broker_cut_from_zookeeper_hears_the_new_controller_once_back(tmp_path: Path) -> None:
    hosts = NetnsHosts()
    try:
        hosts.call_in("client", lambda: _scenario(tmp_path, hosts))
    finally:
        hosts.close()


def _scenario(directory: Path, hosts: NetnsHosts) -> None:
    cluster = FaultCluster(directory, hosts, settings=SETTINGS).start()
    try:
        topic = "resend"
        cluster.create_topic(topic, 3, {"min.insync.replicas": "2"})
        cluster.wait_until(lambda: cluster.isr_full(topic), 60, "a whole ISR")
        controller = cluster.controller()
        victim = next(b for b in sorted(cluster.brokers) if b != controller)
        log = cluster.brokers[victim].log_file
        seen = len(log.read_text(errors="replace"))
        hosts.partition(f"b{victim}", "zk")
        cluster.wait_until(
            lambda: _logged(log, "connection to ZooKeeper lost", seen), 30, "the cut noticed"
        )
        cut_at = time.monotonic()
        cluster.terminate(controller)  # resigns at once: a third broker takes over
        cluster.wait_until(
            lambda: _logged(log, "STALE_CONTROLLER_EPOCH", seen), 30, "the new one refused"
        )
        hosts.heal()
        assert time.monotonic() - cut_at < 6, "too slow: the session may have expired"
        live = [b for b in cluster.brokers if b != controller]

        def agreed() -> bool:
            views = cluster.views(topic)
            if len({views[b] for b in live}) != 1:
                return False
            layout = cluster.layout(topic, bootstrap=cluster.brokers[victim].address)
            return all(
                leader in live and victim in isr and len(isr) == 2
                for leader, _, isr in layout.values()
            )

        try:  # before the old controller comes back: its return makes everyone be told again
            cluster.wait_until(agreed, 30, "the cut-off broker and the cluster agree")
        except TimeoutError as e:
            raise AssertionError(f"{e}: {cluster.views(topic)}") from None
        assert not _logged(log, "with a new session", seen), "re-registered: inconclusive"
        cluster.start_broker(controller)
    finally:
        cluster.close()
