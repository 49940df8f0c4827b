"""A broker's place in a ZooKeeper-backed cluster: cluster id, `/brokers/ids/N`, controller.

With `zookeeper.connect` set, the broker
- takes the cluster id from `/cluster/id` (creating it from `meta.properties` for the first
  broker) and refuses to start when the two disagree, as Kafka does (the data dir belongs to
  another cluster);
- registers itself as the ephemeral `/brokers/ids/N` with Kafka's JSON (endpoints, rack),
  waiting while a previous session of the same broker id has not expired yet;
- runs for controller (`controller/election.py`).
Until replication lands (issue 6), one broker per cluster: a broker that finds others
registered refuses to start rather than serve partitions it would wrongly believe it leads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from riverlog.controller.election import ControllerElection
from riverlog.metadata import layout
from riverlog.metadata.store import MetadataStore, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)


class ClusterMembershipError(RuntimeError):
    """The broker cannot join this cluster (wrong cluster id, id taken, not supported yet)."""


def cluster_id_from_store(store: MetadataStore, local_id: str) -> str:
    """The cluster's id: `/cluster/id`'s, created from `local_id` when absent."""
    try:
        return str(json.loads(store.get(layout.CLUSTER_ID).data)["id"])
    except NoNodeError:
        pass
    try:
        store.create(layout.CLUSTER_ID, json.dumps({"version": "1", "id": local_id}).encode())
    except NodeExistsError:
        return cluster_id_from_store(store, local_id)
    return local_id


def check_cluster_id(stored: str, cluster: str) -> None:
    if stored != cluster:
        raise ClusterMembershipError(
            f"The Cluster ID {cluster} doesn't match stored clusterId {stored} in "
            "meta.properties. The broker is trying to join the wrong cluster. Configured "
            "zookeeper.connect may be wrong."
        )


async def register_broker(
    store: MetadataStore,
    registration: layout.BrokerRegistration,
    *,
    wait_ms: int,
) -> None:
    """Create `/brokers/ids/N`; retry while an expiring session of the same id holds it."""
    others = [i for i in _registered(store) if i != registration.broker_id]
    if others:
        raise ClusterMembershipError(
            "riverlog runs one broker per cluster until replication lands; brokers "
            f"{', '.join(map(str, sorted(others)))} are already registered in ZooKeeper"
        )
    path = layout.broker_path(registration.broker_id)
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        try:
            store.create(path, registration.to_json(), ephemeral=True)
            return
        except NodeExistsError:
            if time.monotonic() > deadline:
                raise ClusterMembershipError(
                    f"broker id {registration.broker_id} is registered by another live broker"
                ) from None
            await asyncio.sleep(0.5)


def _registered(store: MetadataStore) -> list[int]:
    try:
        return [int(child) for child in store.children(layout.BROKER_IDS)]
    except NoNodeError:
        return []


def start_election(store: MetadataStore, broker_id: int) -> ControllerElection:
    """Run for controller; watch callbacks come back onto the running event loop."""
    loop = asyncio.get_running_loop()

    def elected(epoch: int) -> None:
        log.info("broker %d is the controller (epoch %d)", broker_id, epoch)

    def on_loop(fn: Callable[[], None]) -> None:
        loop.call_soon_threadsafe(fn)

    election = ControllerElection(store, broker_id, elected, schedule=on_loop)
    election.elect()
    return election
