"""The broker process: wiring of metadata, storage, replicas, handlers and the network.

Startup order: metadata store and topic registry → log manager → group coordinator →
handlers → listener → registration as `/brokers/ids/N` and the run for controller; the
controller then tells the broker what to lead and follow (LeaderAndIsr), and the coordinator
loads its offsets partitions, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile. Shutdown
runs the other way, in a fixed order (after a controlled shutdown): stop accepting, answer
waiting group requests and fetches, drain responses in flight, close logs cleanly (flush,
checkpoints, clean-shutdown marker), close the metadata store.

Without ZooKeeper (`zookeeper.connect` empty) the broker keeps cluster metadata in
`<data-dir>/riverlog-metadata.json` through the embedded store, so topics survive restarts;
with `zookeeper.connect` the same tree lives in ZooKeeper. Either way the broker registers in
the tree and runs for controller (`server/registration.py`): a single node is a cluster of
one, on the same controller code path, and `start` returns once it leads its partitions.

Broker configs: `server.properties` and `--override`, under the dynamic broker configs of
`/config/brokers` (`server/broker_configs.py`), read at start and whenever they change;
`config` and `topic_defaults` are replaced as a whole then.

Ownership: the broker owns every component it creates; handlers receive the broker and use
its components on the event loop thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import random
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from riverlog.clock import SYSTEM_CLOCK, Clock
from riverlog.controller.assignment import AssignmentError, assign
from riverlog.metadata import layout
from riverlog.metadata.store import EmbeddedStore, MetadataStore, NodeExistsError
from riverlog.metadata.zookeeper import ZooKeeperStore
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.security import authorization, authorizer
from riverlog.security.broker_security import BrokerSecurity, raw_properties
from riverlog.server import config_changes, registration, txn_verification
from riverlog.server.admission import ConnectionQuotas, MemoryPool
from riverlog.server.broker_configs import DEFAULT_ENTITY, DynamicBrokerConfigs
from riverlog.server.config import BrokerConfig, ConfigError
from riverlog.server.config_changes import ConfigChangeListener
from riverlog.server.controller.service import ControllerService
from riverlog.server.dispatch import Dispatcher, Handler, RequestContext, Response
from riverlog.server.fencing import ControllerFence
from riverlog.server.fetch_session import FetchSessionCache
from riverlog.server.group_coordinator import GroupCoordinator
from riverlog.server.handlers import HANDLERS
from riverlog.server.listener import NetworkServer
from riverlog.server.metadata_cache import MetadataCache
from riverlog.server.metrics import endpoint as metrics_endpoint
from riverlog.server.producer_ids import ProducerIdAllocator
from riverlog.server.quotas.manager import QuotaManager
from riverlog.server.replication.replica_fetcher import ReplicaFetchers
from riverlog.server.replication.replica_manager import ReplicaManager
from riverlog.server.replication.throttle import ReplicationQuota
from riverlog.server.topics import Topic, TopicRegistry
from riverlog.server.transaction_coordinator import TransactionCoordinator
from riverlog.server.txn_offsets import TxnOffsets
from riverlog.server.txn_verification import TxnVerifier
from riverlog.storage import checkpoint
from riverlog.storage.dir_lock import LogDirLock
from riverlog.storage.log_config import InvalidConfigError, LogConfig
from riverlog.storage.manager import LogManager

log = logging.getLogger(__name__)

METADATA_FILE = "riverlog-metadata.json"
READY_TIMEOUT_S = 10.0
META_PROPERTIES = "meta.properties"


def _open_store(
    config: BrokerConfig, data_dir: Path, on_session: Callable[[str], None]
) -> MetadataStore:
    """ZooKeeper when `zookeeper.connect` is set, else the embedded store in the data dir."""
    connect = config["zookeeper.connect"]
    if connect:
        return ZooKeeperStore(
            connect,
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connect_timeout_s=_connection_timeout_ms(config) / 1000,
            on_session=on_session,
        )
    return EmbeddedStore(data_dir / METADATA_FILE)


def _connection_timeout_ms(config: BrokerConfig) -> int:
    """How long start-up waits for ZooKeeper (Kafka's default: the session timeout)."""
    return int(config["zookeeper.connection.timeout.ms"] or config["zookeeper.session.timeout.ms"])


def _stored_cluster_id(data_dirs: list[Path]) -> str | None:
    """The cluster id in the log directories' `meta.properties` (Kafka's: version,
    broker.id, cluster.id); directories that disagree are refused, as Kafka refuses them."""
    found: dict[str, Path] = {}
    for data_dir in data_dirs:
        path = data_dir / META_PROPERTIES
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as e:  # an unreadable directory: the log manager takes it offline
            log.debug("cannot read %s: %s", path, e)
            continue
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                found.setdefault(value.strip(), data_dir)
    if len(found) > 1:
        raise ConfigError(
            "Invalid cluster.id in: "
            + ", ".join(str(d / META_PROPERTIES) for d in found.values())
            + f". Expected a single cluster id, found {sorted(found)}"
        )
    return next(iter(found), None)


def _new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MetadataStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.clock = clock
        self.broker_id = config.broker_id
        self.data_dir = config.data_dir
        with contextlib.suppress(OSError):  # an unusable directory goes offline (KIP-112)
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self.dir_lock = LogDirLock(config.log_dirs)  # before anything reads the directory
        self.rack: str | None = config["broker.rack"] or None
        self.cluster_membership = registration.ClusterMembership(self)
        self.security = BrokerSecurity(raw_properties(config))  # validated before the store
        on_session = self.cluster_membership.session_changed
        self.store = store or _open_store(config, self.data_dir, on_session)
        if isinstance(self.store, ZooKeeperStore):  # start-up waits out a dropped connection
            self.store.patience_s = _connection_timeout_ms(config) / 1000
        self.security.store = self.store
        props = raw_properties(config)
        self.authorizer = (
            authorizer.Authorizer(props, self.store) if authorizer.configured(props) else None
        )
        self.in_zookeeper = bool(config["zookeeper.connect"])
        stored = _stored_cluster_id(config.log_dirs)
        self.cluster_id = stored or _new_cluster_id()
        if self.in_zookeeper:  # the cluster's id wins; a data dir of another cluster is refused
            self.cluster_id = registration.cluster_id_from_store(self.store, self.cluster_id)
            if stored is not None:
                registration.check_cluster_id(stored, self.cluster_id)
        for data_dir in config.log_dirs:  # each log directory has its own
            meta = data_dir / META_PROPERTIES
            with contextlib.suppress(OSError):  # (an unusable one goes offline below)
                if not meta.exists():
                    # atomically and fsynced (as Kafka): a machine crash must not leave it
                    # empty, or the broker would come back under a new cluster id
                    checkpoint.write_atomically(
                        meta,
                        f"version=0\nbroker.id={self.broker_id}\n"
                        f"cluster.id={self.cluster_id}\n".encode(),
                    )
        self.fence = ControllerFence(self.store, self.broker_id)
        self.topics = TopicRegistry(self.store)
        self.config_changes = ConfigChangeListener(self)
        self.dynamic_configs = DynamicBrokerConfigs(config, self.store)
        config = self.config = self.dynamic_configs.reload()
        self.topics.load()
        self.topic_defaults = config.topic_defaults()
        self.logs = LogManager(
            config.log_dirs,
            self.topic_defaults,
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            checkpoint_interval_ms=config["log.flush.offset.checkpoint.interval.ms"],
            topic_configs={t.name: t.config for t in self.topics.all()},
            cleaner_enabled=config["log.cleaner.enable"],
            clock_ms=clock.wall_ms,
            cleaner_backoff_ms=config["log.cleaner.backoff.ms"],
        )
        self.fetch_sessions = FetchSessionCache()
        self.metadata = MetadataCache()
        fetchers = ReplicaFetchers(
            self.broker_id,
            max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            partition_max_bytes=config["replica.fetch.max.bytes"],
            backoff_ms=config["replica.fetch.backoff.ms"],
            quota=ReplicationQuota(config["follower.replication.throttled.rate"]),
            clock=self.clock,
        )
        fetchers.security = self.security.inter_broker
        self.replicas = ReplicaManager(
            self.broker_id,
            self.logs,
            self.store,
            fetchers,
            ReplicationQuota(config["leader.replication.throttled.rate"]),
            self.clock,
            replica_selector=config["replica.selector.class"] or "",
            rack_of=self._rack_of,
        )
        self.all_dirs_failed = asyncio.Event()
        """Set when no log directory is online any more: the broker's owner stops it, as
        Kafka's LogDirFailureHandler does (`riverlog server` then exits with status 1)."""
        self.replicas.on_all_dirs_failed = self._all_dirs_failed
        self.controller = ControllerService(self)
        self.producer_ids = ProducerIdAllocator(self.store, self.broker_id)
        self._isr_task: asyncio.Task[None] | None = None
        self.groups = GroupCoordinator(self)
        self.transactions = TransactionCoordinator(self)
        self.txn_offsets = TxnOffsets(self)
        self.txn_verifier = TxnVerifier(self)
        self.client_quotas = QuotaManager(
            self.store,
            self.clock,
            config["quota.window.num"],
            config["quota.window.size.seconds"] * 1000,
        )
        self.client_quotas.reload()  # notifications from here on: `config_changes`
        self.dispatcher = Dispatcher()
        for request_cls, handler in HANDLERS:
            bound: Handler = self._bind(handler)
            if self.authorizer is not None:  # one rule per API: security/authorization.py
                bound = authorization.wrap(request_cls.API_KEY, bound, self.authorizer, self.topics)
            self.dispatcher.register(request_cls, bound)
        quotas = self.connection_quotas = ConnectionQuotas(  # one budget for all listeners
            config["max.connections"],
            config["max.connections.per.ip"],
            config.connection_overrides(),
        )
        memory = MemoryPool(config["queued.max.request.bytes"])
        self.networks = [
            NetworkServer(
                self.dispatcher,
                spec.host,
                spec.port,
                max_request_bytes=config["socket.request.max.bytes"],
                max_idle_ms=config["connections.max.idle.ms"],
                listener_name=spec.name,
                ssl_context=self.security.per_listener[spec.name].ssl_context,
                new_sasl=self.security.new_sasl(spec.name),
                principal_of_certificate=(
                    self.security.per_listener[spec.name].principal_of_certificate
                ),
                memory=memory,
                quotas=quotas,
                clock=self.clock,
                client_quotas=self.client_quotas,
            )
            for spec in self.security.listeners.bound
        ]
        self.network = self.networks[0]
        self.metrics = metrics_endpoint.for_broker(self)  # None unless metrics.listener

    def _all_dirs_failed(self) -> None:  # the replica manager tells this once
        dirs = ", ".join(str(d) for d in self.logs.dirs)
        log.critical("Shutdown broker because all log dirs in %s have failed", dirs)
        self.all_dirs_failed.set()

    def _rack_of(self, broker_id: int) -> str | None:
        if broker_id == self.broker_id:
            return self.rack
        known = self.metadata.brokers.get(broker_id)
        return known.rack if known is not None else None

    def _bind(self, handler: Callable[..., Any]) -> Callable[[RequestContext], Response]:
        return functools.partial(handler, self)

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        finally:  # from now on a call to an unreachable ZooKeeper fails at once
            if isinstance(self.store, ZooKeeperStore):
                self.store.patience_s = 0.0

    async def _start(self) -> None:
        for network in self.networks:
            await network.start()
        if self.metrics is not None:
            await self.metrics.start()
        if self.authorizer is not None:
            self.authorizer.start()  # ACLs loaded before the broker registers
        await self.cluster_membership.start()
        self.config_changes.start()
        lag_ms = self.config["replica.lag.time.max.ms"]
        self._isr_task = asyncio.get_running_loop().create_task(self._shrink_isrs(lag_ms))
        if not self.in_zookeeper:
            await self._lead_everything(READY_TIMEOUT_S)
        self.groups.start()
        self.transactions.start()
        loop = asyncio.get_running_loop()
        self.logs.on_dir_failure = lambda d: loop.call_soon_threadsafe(
            self.replicas.log_dir_failed, d
        )
        self.logs.start_background()
        log.info(
            "riverlog broker %d listening on %s:%d (cluster %s)",
            self.broker_id,
            self.network.host,
            self.network.port,
            self.cluster_id,
        )

    async def _lead_everything(self, timeout_s: float) -> None:
        """A single node: wait until its controller made it leader of every partition, so
        that the broker is ready to serve when `start` returns."""
        deadline = self.clock.monotonic_s() + timeout_s
        while not self._leads_everything():
            if self.clock.monotonic_s() > deadline:
                log.warning(
                    "broker %d: not leading all its partitions %.0f s after start",
                    self.broker_id,
                    timeout_s,
                )
                return
            await asyncio.sleep(0.005)

    def _leads_everything(self) -> bool:
        if self.metadata.controller_id < 0:
            return False
        return self.replicas.leads_all(
            (topic.name, index) for topic in self.topics.all() for index in topic.partitions
        )

    async def _shrink_isrs(self, lag_ms: int) -> None:
        while True:
            await asyncio.sleep(lag_ms / 2000)
            try:
                self.replicas.shrink_isrs(lag_ms)
            except Exception:
                log.exception("ISR shrink check failed")

    async def stop(self) -> None:
        if self.config["controlled.shutdown.enable"]:
            await registration.controlled_shutdown(self)
        for network in self.networks:
            await network.stop_accepting()
        if self._isr_task is not None:
            self._isr_task.cancel()
        await self.controller.stop()
        self.groups.stop()
        await self.transactions.stop()
        await self.txn_verifier.close()
        await self.replicas.stop()
        await asyncio.gather(*(network.drain(5.0) for network in self.networks))
        if self.metrics is not None:
            await self.metrics.stop()
        self.logs.shutdown()
        self.cluster_membership.resign()
        self.store.close()
        self.dir_lock.release()

    @property
    def advertised(self) -> tuple[str, int]:
        """The first listener's advertised address (what `bootstrap_servers` names)."""
        return self.advertised_endpoints()[0][1:]

    def advertised_endpoints(self) -> list[tuple[str, str, int]]:
        """(listener, host, port) of every listener as advertised, in `listeners` order; a
        port 0 (any free port) is the one bound."""
        bound = {n.listener_name: n.port for n in self.networks}
        return [
            (spec.name, spec.host or "127.0.0.1", spec.port or bound[spec.name])
            for spec in self.security.listeners.advertised
        ]

    @property
    def bootstrap_servers(self) -> str:
        host, port = self.advertised
        return f"{host}:{port}"

    # --- topics --------------------------------------------------------------------------

    def live_brokers(self) -> dict[int, str | None]:
        """Broker id → rack of the brokers new replicas may be placed on."""
        return registration.live_brokers(self.store)

    def assign(self, partitions: int, factor: int, first: int = 0) -> dict[int, list[int]]:
        """Kafka's replica assignment over the live brokers, from a random start."""
        brokers = self.live_brokers()
        try:
            return assign(
                brokers,
                partitions,
                factor,
                first_partition=first,
                start_index=random.randrange(len(brokers)),
                initial_shift=random.randrange(max(1, len(brokers))),
            )
        except AssignmentError as e:
            raise KafkaError(error_codes.INVALID_REPLICATION_FACTOR, str(e)) from None

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> Topic:
        return self.create_topic_with_assignment(
            name, self.assign(partitions, replication_factor), configs
        )

    def create_topic_with_assignment(
        self,
        name: str,
        assignment: dict[int, list[int]],
        configs: dict[str, str],
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Register a topic; the controller elects its leaders when it sees the new topic."""
        return self.topics.create(name, assignment, configs, validate_only=validate_only)

    def delete_topic(self, name: str) -> Topic:
        """Queue a topic's deletion for the controller (`/admin/delete_topics`)."""
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        with contextlib.suppress(NodeExistsError):
            self.store.create(f"{layout.DELETE_TOPICS}/{name}", b"")
        return topic

    def add_partitions(
        self,
        name: str,
        count: int,
        *,
        validate_only: bool = False,
        assignments: list[list[int]] | None = None,
    ) -> Topic:
        """Grow a topic to `count` partitions; the new ones placed by Kafka's assignment,
        or on `assignments` (one replica list per new partition, checked as Kafka's
        ZooKeeper-mode admin checks them, with its messages)."""
        topic = self.topics.refresh(name)  # a reassignment may have changed its replicas
        if topic is None:
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        current = len(topic.partitions)
        if count <= current:
            raise KafkaError(
                error_codes.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than "
                f"or equal to the requested {count}.",
            )
        factor = len(topic.partitions[0])
        if assignments is None:
            new = self.assign(count - current, factor, first=current)
        else:
            new = self._given_assignment(assignments, count - current, current, factor)
        return self.topics.add_partitions(name, new, validate_only=validate_only)

    def _given_assignment(
        self, assignments: list[list[int]], increment: int, first: int, factor: int
    ) -> dict[int, list[int]]:
        invalid = error_codes.INVALID_REPLICA_ASSIGNMENT
        unknown = {b for replicas in assignments for b in replicas} - set(self.live_brokers())
        if unknown:
            names = ", ".join(map(str, sorted(unknown)))
            raise KafkaError(invalid, f"Unknown broker(s) in replica assignment: {names}.")
        if len(assignments) != increment:
            raise KafkaError(
                invalid,
                f"Increasing the number of partitions by {increment} but "
                f"{len(assignments)} assignments provided.",
            )
        new = {first + i: list(replicas) for i, replicas in enumerate(assignments)}
        for index, replicas in new.items():
            listed = ", ".join(map(str, replicas))
            if not replicas:
                raise KafkaError(
                    invalid, f"Cannot have replication factor of 0 for partition id {index}."
                )
            if len(set(replicas)) != len(replicas):
                raise KafkaError(
                    invalid,
                    f"Duplicate brokers not allowed in replica assignment: {listed} "
                    f"for partition id {index}.",
                )
            if len(replicas) != factor:
                raise KafkaError(
                    invalid,
                    "Inconsistent replication factor between partitions, partition 0 has "
                    f"{factor} while partition {index} has replication factor {len(replicas)}.",
                )
        return new

    def topic_config(self, name: str) -> dict[str, str]:
        topic = self.topics.get(name) or self.topics.refresh(name)
        return {} if topic is None else topic.config

    def metadata_changed(self, deleted: list[str]) -> None:
        """After UpdateMetadata: learn topics created elsewhere, forget deleted ones."""
        for name in deleted:
            self.topics.forget(name)
        for name, topic_id in self.metadata.topic_ids.items():
            known = self.topics.get(name)
            if known is None or known.topic_id != topic_id:
                self.topics.refresh(name)

    async def wait_for_topic(
        self, name: str, *, exists: bool, timeout_s: float, partitions: int = 1
    ) -> bool:
        """Wait until this broker's metadata has the topic with at least `partitions`
        partitions, all with leaders (or, with `exists=False`, no longer has it)."""
        deadline = self.clock.monotonic_s() + timeout_s
        while self.clock.monotonic_s() < deadline:
            parts = self.metadata.partitions_of(name)
            if exists and len(parts) >= partitions and all(p.leader >= 0 for p in parts.values()):
                return True
            if not exists and not parts:
                return True
            await asyncio.sleep(0.02)
        return False

    def set_topic_config(self, name: str, config: dict[str, str]) -> None:
        try:
            LogConfig.from_map({**self.topic_defaults, **config})
        except InvalidConfigError as e:
            raise KafkaError(error_codes.INVALID_CONFIG, str(e)) from None
        self.topics.set_config(name, config)
        self.logs.update_config(name, config)
        config_changes.announce(self.store, f"{config_changes.TOPIC_ENTITY}{name}")

    def reload_topic_config(self, name: str) -> None:
        """Another broker changed the topic's config: read it and apply it to our logs."""
        topic = self.topics.refresh(name)
        if topic is not None:
            self.logs.update_config(name, topic.config)

    def set_broker_config(self, entity: str, config: dict[str, str]) -> None:
        """Replace the dynamic config of broker `entity` (`<default>`: of every broker)."""
        self.dynamic_configs.validate(entity, config)
        self.dynamic_configs.write(entity, config)
        if entity in (str(self.broker_id), DEFAULT_ENTITY):
            self.reload_broker_config()
        config_changes.announce(self.store, f"{config_changes.BROKER_ENTITY}{entity}")

    def reload_broker_config(self) -> None:
        """This broker's dynamic config changed: the new values apply from now on, log
        defaults to every log not overriding them."""
        self.config = self.dynamic_configs.reload()
        self.topic_defaults = self.config.topic_defaults()
        self.replicas.fetch_reader.leader_throttle.rate = self.config[
            "leader.replication.throttled.rate"
        ]
        self.replicas.fetchers.quota.rate = self.config["follower.replication.throttled.rate"]
        self.logs.cleaner_backoff_ms = self.config["log.cleaner.backoff.ms"]
        self.txn_verifier.enabled = self.config[txn_verification.ENABLE_KEY]
        quotas = self.connection_quotas  # for connections from now on, as Kafka's
        quotas.max_connections = self.config["max.connections"]
        quotas.per_ip = self.config["max.connections.per.ip"]
        quotas.overrides = self.config.connection_overrides()
        self.logs.update_defaults(
            self.topic_defaults, {t.name: t.config for t in self.topics.all()}
        )

    def disk_usage(self, directory: Path | None = None) -> tuple[int, int]:
        """(total, usable) bytes of the filesystem holding `directory` (default: the
        first log directory)."""
        usage = shutil.disk_usage(directory or self.data_dir)
        return usage.total, usage.free
