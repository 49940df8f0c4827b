"""A broker's place in a ZooKeeper-backed cluster: cluster id, `/brokers/ids/N`, controller.

With `zookeeper.connect` set, the broker
- takes the cluster id from `/cluster/id` (creating it from `meta.properties` for the first
  broker) and refuses to start when the two disagree, as Kafka does (the data dir belongs to
  another cluster);
- registers itself as the ephemeral `/brokers/ids/N` with Kafka's JSON (endpoints, rack),
  waiting while a previous session of the same broker id has not expired yet;
- runs for controller (`server/controller/controller_election.py`);
- after its ZooKeeper session expired, registers and runs for controller again
  (`ClusterMembership`);
- on a clean stop, asks the controller to move its leaderships away first (controlled
  shutdown, Kafka's `controlled.shutdown.*` settings), so clients see only retriable errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from riverlog.client.connection import Connection
from riverlog.clock import Clock
from riverlog.metadata import layout
from riverlog.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    StoreUnavailableError,
)
from riverlog.protocol.messages import ControlledShutdownRequest, ControlledShutdownResponse
from riverlog.server.controller.controller_election import ControllerElection, controller_id

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

REJOIN_BACKOFF_S = 1.0
CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0


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
    clock: Clock,
    ours: Collection[bytes] = (),
) -> bytes:
    """Create `/brokers/ids/N` (its data returned); retry while an expiring session of the
    same id holds it. A node holding this registration or one of `ours` (this process's
    earlier ones: each carries its own timestamp) is this process's, so of its current
    session — an expired session's ephemerals are gone: a create whose answer was lost with
    the connection (the store made the call again), or a registration made after a session
    expiry that the event loop has not heard of yet."""
    path = layout.broker_path(registration.broker_id)
    data = registration.to_json()
    mine = {data, *ours}
    deadline = clock.monotonic_s() + wait_ms / 1000
    while True:
        try:
            store.create(path, data, ephemeral=True)
            return data
        except NodeExistsError:
            with contextlib.suppress(NoNodeError):
                existing = store.get(path).data
                if existing in mine:
                    return existing
            if clock.monotonic_s() > deadline:
                raise ClusterMembershipError(
                    f"broker id {registration.broker_id} is registered by another live broker"
                ) from None
            await asyncio.sleep(0.5)


def _registered(store: MetadataStore) -> list[int]:
    try:
        return [int(child) for child in store.children(layout.BROKER_IDS)]
    except NoNodeError:
        return []


def registered_brokers(store: MetadataStore) -> list[layout.BrokerRegistration]:
    """The brokers registered now, by id."""
    ids = _registered(store)
    nodes = store.get_many([layout.broker_path(b) for b in ids])
    return [
        layout.BrokerRegistration.from_json(b, nodes[layout.broker_path(b)].data)
        for b in sorted(ids)
        if layout.broker_path(b) in nodes
    ]


def live_brokers(store: MetadataStore) -> dict[int, str | None]:
    """Registered broker id → rack."""
    return {reg.broker_id: reg.rack for reg in registered_brokers(store)}


class ClusterMembership:
    """This broker's registration and candidacy, kept across ZooKeeper trouble.

    Session events arrive on the store's thread (`session_changed`) and are handled on the
    event loop. "lost" means the session expired: `/brokers/ids/N` and any `/controller` of
    ours are gone, so a controller stops acting at once; when a new session connects, the
    broker registers again and runs for controller again (Kafka's handleNewSession). A
    reconnect within the same session keeps the ephemerals, but one-shot watches may be lost
    (field notes), so the controller re-reads the cluster and a candidate re-arms its watch.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.election: ControllerElection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._disconnected = False
        self._expired = False
        self._rejoining: asyncio.Task[None] | None = None
        self._deposing: asyncio.Task[None] | None = None  # the controller stopping
        self._stopped = False
        self._registered: list[bytes] = []  # every `/brokers/ids/N` data this process wrote

    def registration(self) -> layout.BrokerRegistration:
        """Every advertised listener, the inter-broker one first: whoever reaches a broker
        from inside the cluster (controller, followers) takes the first endpoint."""
        broker = self.broker
        listeners = broker.security.listeners
        endpoints = [
            layout.Endpoint(name, host, port) for name, host, port in broker.advertised_endpoints()
        ]
        endpoints.sort(key=lambda e: e.listener != listeners.inter_broker)
        protocols = {e.listener: listeners.protocols[e.listener] for e in endpoints}
        return layout.BrokerRegistration(
            broker.broker_id, tuple(endpoints), broker.rack, broker.clock.wall_ms(), protocols
        )

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        wait_ms = self.broker.config["zookeeper.session.timeout.ms"]
        registered = await register_broker(
            self.broker.store,
            self.registration(),
            wait_ms=wait_ms,
            clock=self.broker.clock,
            ours=self._registered,
        )
        self._registered = [*self._registered[-3:], registered]
        self._run_for_controller()

    def _run_for_controller(self) -> None:
        loop = asyncio.get_running_loop()
        broker_id = self.broker.broker_id

        def elected(epoch: int) -> None:
            log.info("broker %d is the controller (epoch %d)", broker_id, epoch)
            election = self.election
            assert election is not None
            # Start once `elect` has returned (it is running inside it now).
            loop.call_soon(self._start_controller, election, epoch)

        def on_loop(fn: Callable[[], None]) -> None:
            loop.call_soon_threadsafe(fn)

        self.election = ControllerElection(
            self.broker.store, broker_id, elected, schedule=on_loop, clock=self.broker.clock
        )
        self.election.elect()

    def _start_controller(self, election: ControllerElection, epoch: int) -> None:
        if election is self.election and election.epoch == epoch and not self._stopped:
            self.broker.controller.start(epoch, election.epoch_version)

    # --- the ZooKeeper session -------------------------------------------------------

    def session_changed(self, state: str) -> None:
        """From the store's thread: "suspended", "connected" or "lost"."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_session, state)

    def _on_session(self, state: str) -> None:
        if self._stopped:
            return
        if state == "suspended":
            log.warning("broker %d: connection to ZooKeeper lost", self.broker.broker_id)
            self._disconnected = True
        elif state == "lost":
            log.warning("broker %d: ZooKeeper session expired", self.broker.broker_id)
            self._disconnected = self._expired = True
            if self.election is not None:
                self.election.abandon()
            if self.broker.controller.active:
                self._deposing = asyncio.get_running_loop().create_task(
                    self.broker.controller.stop()
                )
        elif state == "connected" and self._disconnected:
            log.info(
                "broker %d: reconnected to ZooKeeper%s",
                self.broker.broker_id,
                " with a new session" if self._expired else "",
            )
            expired, self._disconnected, self._expired = self._expired, False, False
            if self._rejoining is None or self._rejoining.done():
                self._rejoining = asyncio.get_running_loop().create_task(self._rejoin(expired))

    async def _rejoin(self, expired: bool) -> None:
        while not self._stopped:
            try:
                if expired:
                    if self._deposing is not None:
                        await self._deposing  # before a new term can start it again
                    await self.start()
                elif self.broker.controller.active:
                    self.broker.controller.resync()
                elif self.election is not None:
                    self.election.elect()
                self.broker.config_changes.resync()  # its watch may be gone too
                return
            except (StoreUnavailableError, ClusterMembershipError) as e:
                log.warning(
                    "broker %d: rejoining the cluster: %s; retrying", self.broker.broker_id, e
                )
                await asyncio.sleep(REJOIN_BACKOFF_S)

    def resign(self) -> None:
        self._stopped = True
        if self._rejoining is not None:
            self._rejoining.cancel()
        if self.election is not None:
            with contextlib.suppress(StoreUnavailableError):
                self.election.resign()


async def controlled_shutdown(broker: Broker) -> bool:
    """Ask the controller to move this broker's leaderships elsewhere; whether it did.
    Retries `controlled.shutdown.max.retries` times, `controlled.shutdown.retry.backoff.ms`
    apart, while partitions remain led here or no controller answers."""
    config = broker.config
    for attempt in range(config["controlled.shutdown.max.retries"] + 1):
        if attempt:
            await asyncio.sleep(config["controlled.shutdown.retry.backoff.ms"] / 1000)
        try:
            controller = controller_id(broker.store)
            data = broker.store.get(layout.broker_path(controller)).data
            epoch = broker.store.get(layout.broker_path(broker.broker_id)).czxid
        except NoNodeError:
            continue
        except StoreUnavailableError as e:
            log.info("controlled shutdown: %s", e)
            continue
        endpoint = layout.BrokerRegistration.from_json(controller, data).endpoints[0]
        try:
            conn = await Connection.open(
                endpoint.host,
                endpoint.port,
                client_id=f"broker-{broker.broker_id}-shutdown",
                security=broker.security.inter_broker,
            )
            try:
                async with asyncio.timeout(CONTROLLED_SHUTDOWN_TIMEOUT_S):
                    response = await conn.send(
                        ControlledShutdownRequest(broker_id=broker.broker_id, broker_epoch=epoch)
                    )
            finally:
                await conn.close()
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("controlled shutdown: controller %d unreachable: %r", controller, e)
            continue
        assert isinstance(response, ControlledShutdownResponse)
        if response.error_code == 0 and not response.remaining_partitions:
            log.info("controlled shutdown of broker %d succeeded", broker.broker_id)
            return True
        log.info(
            "controlled shutdown: error %d, %d partitions still led here",
            response.error_code,
            len(response.remaining_partitions),
        )
    log.warning("controlled shutdown of broker %d did not complete", broker.broker_id)
    return False
