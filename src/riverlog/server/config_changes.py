"""Config changes made through any broker, applied by every broker: `/config/changes`.

Kafka's ZooKeeper-era scheme. Whoever changes `/config/topics/T` or `/config/brokers/B`
then creates a sequential node `/config/changes/config_change_NNNNNNNNNN` naming the entity
(`topics/T`, `brokers/B`, `brokers/<default>`, `users/U`, `clients/C`,
`users/U/clients/C`) — `announce`. Every broker watches
`/config/changes`; for each notification numbered above the last it handled, it re-reads
that topic's config and applies it to its logs, or — for its own id or the cluster default —
its dynamic broker config (`server/broker_configs.py`), so retention, segment size,
`min.insync.replicas`, cleanup policy and the like change without a restart; a user or
client entity's client quotas are re-read (`server/quotas/`).

Invariants: notifications are handled in number order, each once per broker; the watch is
re-armed before the children are read, so a change made meanwhile fires it again. The writer
deletes notifications older than `EXPIRY_MS` (Kafka's 15 minutes); a broker whose store
session was re-established may have missed some, so it re-reads every topic's config then
(`resync`). Runs on the event loop; the store's watch callback only schedules onto it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from riverlog.metadata import layout
from riverlog.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    StoreUnavailableError,
)
from riverlog.server.broker_configs import DEFAULT_ENTITY

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

EXPIRY_MS = 15 * 60 * 1000
RESYNC_RETRY_S = 1.0
TOPIC_ENTITY = "topics/"
BROKER_ENTITY = "brokers/"
USER_ENTITY = "users/"
CLIENT_ENTITY = "clients/"


def _sequence(child: str) -> int:
    return int(child[-10:])


def announce(store: MetadataStore, entity_path: str) -> None:
    """Notify every broker that `entity_path`'s config changed; purge expired notices."""
    now = int(time.time() * 1000)
    store.create_sequential(
        layout.CONFIG_CHANGE_PREFIX, layout.ConfigChange(entity_path, now).to_json()
    )
    children = store.children(layout.CONFIG_CHANGES)
    paths = [f"{layout.CONFIG_CHANGES}/{c}" for c in children]
    for path, node in store.get_many(paths).items():
        if layout.ConfigChange.from_json(node.data).time_ms < now - EXPIRY_MS:
            with contextlib.suppress(NoNodeError):
                store.delete(path)


class ConfigChangeListener:
    def __init__(self, broker: Broker) -> None:
        """Made before the broker reads its topics: notifications from here on are handled
        at `start`, older ones are in the configs the broker reads."""
        self.broker = broker
        self.store = broker.store
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(NodeExistsError):
            if not self.store.exists(layout.CONFIG_CHANGES):
                self.store.create(layout.CONFIG_CHANGES, b"")
        self._last = max(map(_sequence, self.store.children(layout.CONFIG_CHANGES)), default=-1)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._arm()
        self.process()

    def resync(self) -> None:
        """After the store session was re-established: watch again, re-read every config
        (retried every `RESYNC_RETRY_S` while the store is unreachable)."""
        try:
            self._arm()
            self.broker.reload_broker_config()
            self.broker.client_quotas.reload()
            for topic in self.broker.topics.all():
                self.broker.reload_topic_config(topic.name)
            self.process()
        except StoreUnavailableError as e:
            log.warning("config changes: %s; retrying", e)
            assert self._loop is not None
            self._loop.call_later(RESYNC_RETRY_S, self.resync)

    def _arm(self) -> None:
        loop = self._loop
        assert loop is not None

        def fired(_path: str) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._on_change)

        self.store.watch(layout.CONFIG_CHANGES, fired)

    def _on_change(self) -> None:
        try:
            self._arm()
            self.process()
        except StoreUnavailableError as e:  # `resync` follows the reconnection
            log.warning("config change notifications not handled yet: %s", e)

    def process(self) -> None:
        """Apply every notification above the last one handled, in order."""
        children = sorted(self.store.children(layout.CONFIG_CHANGES), key=_sequence)
        fresh = [c for c in children if _sequence(c) > self._last]
        nodes = self.store.get_many([f"{layout.CONFIG_CHANGES}/{c}" for c in fresh])
        for child in fresh:
            node = nodes.get(f"{layout.CONFIG_CHANGES}/{child}")
            self._last = _sequence(child)
            if node is None:
                continue  # purged meanwhile
            try:
                entity = layout.ConfigChange.from_json(node.data).entity_path
            except (ValueError, KeyError, TypeError):
                log.warning("config change %s unreadable: %r", child, bytes(node.data[:200]))
                continue
            if entity.startswith(TOPIC_ENTITY):
                self.broker.reload_topic_config(entity[len(TOPIC_ENTITY) :])
            elif entity.startswith(BROKER_ENTITY):
                if entity[len(BROKER_ENTITY) :] in (str(self.broker.broker_id), DEFAULT_ENTITY):
                    self.broker.reload_broker_config()
            elif entity.startswith((USER_ENTITY, CLIENT_ENTITY)):
                # quotas; SCRAM credentials are read from the store at each login (security/)
                self.broker.client_quotas.changed(entity)
            else:
                log.warning(
                    "config change of %s ignored: only topics, brokers, users and clients have "
                    "dynamic configs",
                    entity,
                )
