"""Controller election on a real ZooKeeper: one winner per epoch, failover to the next broker
with a higher epoch when the controller's session ends, resignation."""

from __future__ import annotations

import threading
import uuid

from riverlog.metadata.store import EmbeddedStore
from riverlog.metadata.zookeeper import ZooKeeperStore
from riverlog.server.controller.controller_election import (
    ControllerElection,
    controller_epoch,
    controller_id,
)
from tests.zookeeper_server import ZooKeeperServer


class Broker:
    """One broker's session and election, recording the epochs it won."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.store = ZooKeeperStore(connect)
        self.won: list[int] = []
        self.elected = threading.Event()
        self.election = ControllerElection(self.store, broker_id, self._won)

    def _won(self, epoch: int) -> None:
        self.won.append(epoch)
        self.elected.set()


def test_one_winner_then_failover_with_a_higher_epoch(zookeeper: ZooKeeperServer) -> None:
    connect = f"{zookeeper.connect}/e-{uuid.uuid4().hex[:8]}"
    brokers = [Broker(connect, i) for i in (1, 2, 3)]
    observer = ZooKeeperStore(connect)
    try:
        for b in brokers:
            b.election.elect()
        winners = [b for b in brokers if b.election.is_controller]
        assert len(winners) == 1 and winners[0].won == [1]
        first = winners[0]
        assert controller_id(observer) == first.election.broker_id
        assert controller_epoch(observer)[0] == 1

        first.store.close()  # the controller's session ends (a crash, seen after the timeout)
        rest = [b for b in brokers if b is not first]
        assert any(b.elected.wait(10) for b in rest)
        seconds = [b for b in rest if b.election.is_controller]
        assert len(seconds) == 1 and seconds[0].won == [2]
        assert controller_epoch(observer)[0] == 2
        assert controller_id(observer) == seconds[0].election.broker_id

        seconds[0].election.resign()
        last = next(b for b in rest if b is not seconds[0])
        assert last.elected.wait(10) and last.won == [3]
        assert controller_id(observer) == last.election.broker_id
    finally:
        for b in brokers[1:]:
            b.store.close()
        observer.close()


def test_a_single_broker_elects_itself_on_the_embedded_store() -> None:
    store = EmbeddedStore(None)
    won: list[int] = []
    election = ControllerElection(store, 0, won.append)
    election.elect()
    assert won == [1] and controller_id(store) == 0
    election.resign()
    assert controller_id(store) == -1 and not election.is_controller
    again = ControllerElection(store, 0, won.append)
    again.elect()
    assert won == [1, 2]
