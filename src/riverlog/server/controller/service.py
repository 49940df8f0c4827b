"""The controller at work: one event queue, ZooKeeper watches in, state writes and broker
requests out. Runs on the broker that won `/controller`
(`server/controller/controller_election.py`).

How it works. On election it reads the cluster from the store (live brokers, topics and
assignments, partition states with their znode versions), elects leaders for partitions that
have none, and sends every live broker UpdateMetadata and LeaderAndIsr for all partitions.
Then it takes one event at a time from its queue: brokers joining or leaving
(`/brokers/ids`), topics created or given partitions (`/brokers/topics`, each topic's node),
ISR changes made by leaders (`/isr_change_notification`), failed log directories
(`/log_dir_event_notification`, KIP-112, `server/controller/log_dir_failures.py`), topic deletions
(`/admin/delete_topics`), partition reassignments (`/admin/reassign_partitions`,
`server/controller/reassignment_executor.py`), controlled shutdowns, and leader elections
(`server/controller/leader_rebalance.py`, through `submit`). Store watches are one-shot and fire on
the store's thread: each re-arms itself and queues its event onto the loop.

Decisions are pure (`controller/context.py`); here they are written — version-checked,
batched, fenced by `/controller_epoch`: `server/controller/state_writes.py` — and sent
(`controller/requests.py`, `server/controller/channel.py`). A partition whose state a
leader changed meanwhile is re-read and decided again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from riverlog.controller import requests
from riverlog.controller.context import (
    ControllerContext,
    TopicInfo,
    elect_offline,
    initial_states,
    move_leadership_off,
    on_bounced,
    on_brokers_failed,
)
from riverlog.metadata import layout
from riverlog.metadata.store import (
    Node,
    NodeExistsError,
    NoNodeError,
    StoreUnavailableError,
)
from riverlog.model import TopicPartition
from riverlog.server.controller.channel import ControllerChannel
from riverlog.server.controller.leader_rebalance import LeaderRebalance
from riverlog.server.controller.log_dir_failures import LogDirFailures
from riverlog.server.controller.reassignment_executor import Reassignments
from riverlog.server.controller.state_writes import (
    NotControllerError,
    check_epoch,
    partition_nodes,
    write_states,
)

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

RESYNC_BACKOFF_S = 1.0
Decide = Callable[
    [ControllerContext, Collection[TopicPartition]], dict[TopicPartition, layout.PartitionState]
]


class ControllerService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.broker_id = broker.broker_id
        self.ctx: ControllerContext | None = None
        self.epoch_version = -1
        self._queue: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.channel = ControllerChannel(broker.broker_id, broker.security.inter_broker)
        self._live_before_resync: set[int] | None = None
        self.leader_rebalance = LeaderRebalance(self)
        self.reassignments = Reassignments(self)
        self.log_dir_failures = LogDirFailures(self)

    @property
    def active(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, epoch: int, epoch_version: int) -> None:
        self._loop = asyncio.get_running_loop()
        self.epoch_version = epoch_version
        self.ctx = ControllerContext(epoch)
        self._queue = asyncio.Queue()  # events of an earlier term are stale
        self._live_before_resync = None
        self._task = self._loop.create_task(self._run())

    async def stop(self) -> None:
        self.leader_rebalance.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.channel.stop()

    def controlled_shutdown(self, broker_id: int) -> asyncio.Future[list[TopicPartition]]:
        """Queue a controlled shutdown; the future gets the partitions still led there."""
        done: asyncio.Future[list[TopicPartition]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(("shutdown", (broker_id, done)))
        return done

    def submit(self, work: Callable[[], None]) -> None:
        """Run `work` on the controller's queue, in turn with the other events."""
        self._queue.put_nowait(("call", work))

    # --- the event loop ----------------------------------------------------------------

    async def _run(self) -> None:
        resync = True  # the first pass is the failover itself
        while True:
            try:
                if resync:
                    self._resync()
                    resync = False
                kind, arg = await self._queue.get()
                if kind == "resync":
                    resync = True
                    continue
                getattr(self, f"_on_{kind}")(arg)
            except NotControllerError:
                log.warning("broker %d is no longer the controller", self.broker_id)
                return
            except StoreUnavailableError as e:
                log.warning(
                    "controller: ZooKeeper unavailable (%s); re-reading the cluster in %.1f s",
                    e,
                    RESYNC_BACKOFF_S,
                )
                resync = True
                await asyncio.sleep(RESYNC_BACKOFF_S)
            except Exception:
                log.exception("controller: handling failed; re-reading the cluster")
                resync = True
                await asyncio.sleep(RESYNC_BACKOFF_S)

    def resync(self) -> None:
        """Re-read the cluster and re-arm every watch (the store reconnected: its watches
        may be gone)."""
        self._queue.put_nowait(("resync", None))

    def _resync(self) -> None:
        """Failover onto a fresh context; brokers known before and gone now, and brokers
        holding replicas but not registered, are handled as failed, as if their departure
        had been watched: they leave every ISR (Kafka's offline replicas at failover). A
        broker that died with the previous controller must not stay in an ISR: restarted, it
        could be elected before it caught up again."""
        if self._live_before_resync is None:  # kept until a resync completes
            self._live_before_resync = set(self._context().live)
        before = self._live_before_resync
        epoch = self._context().epoch
        self.ctx = ControllerContext(epoch)
        for path in (
            layout.BROKER_IDS,
            layout.TOPICS,
            layout.ISR_CHANGE_NOTIFICATION,
            layout.LOG_DIR_EVENT_NOTIFICATION,
            layout.DELETE_TOPICS,
        ):
            with contextlib.suppress(NodeExistsError):
                if not self.store.exists(path):
                    self.store.create(path, b"")
        self._failover(before)
        self._live_before_resync = None

    def _watch(self, path: str, kind: str, arg: object = None) -> None:
        loop = self._loop
        assert loop is not None

        def fired(_path: str) -> None:
            loop.call_soon_threadsafe(self._queue.put_nowait, (kind, arg))

        self.store.watch(path, fired)

    def _context(self) -> ControllerContext:
        assert self.ctx is not None
        return self.ctx

    def _failover(self, live_before: set[int]) -> None:
        ctx = self._context()
        self.reassignments.reset()
        self._watch(layout.BROKER_IDS, "brokers")
        self._watch(layout.TOPICS, "topics")
        self._watch(layout.ISR_CHANGE_NOTIFICATION, "isr_change")
        self._watch(layout.LOG_DIR_EVENT_NOTIFICATION, "log_dir_event")
        self._watch(layout.DELETE_TOPICS, "delete_topics")
        for broker_id in self._registered():
            self._add_broker(broker_id)
        for name in self.store.children(layout.TOPICS):
            self._read_topic(name)
        log.info(
            "controller %d (epoch %d) sees brokers %s and %d topics",
            self.broker_id,
            ctx.epoch,
            sorted(ctx.live),
            len(ctx.topics),
        )
        for name in list(ctx.topics):
            self._write(initial_states(ctx, name))
        self._drop_bounced(ctx.partitions())
        self.channel.keep_only(ctx.live)
        hosting = {b for tp in ctx.partitions() for b in ctx.replicas(tp)}
        gone = (live_before | hosting) - set(ctx.live)
        if gone:
            log.info("controller: brokers %s are not live", sorted(gone))
            unclean = self._unclean_allowed
            self._decide(lambda c, _ps: on_brokers_failed(c, gone, unclean), ctx.partitions())
        self._decide(self._elect_offline, ctx.partitions())
        everything = ctx.partitions()
        self._send_metadata(ctx.live, everything)
        self._send_leader_and_isr(everything)
        self._on_delete_topics(None)
        self._on_isr_change(None)
        self.log_dir_failures.on_event()
        self.leader_rebalance.failover()
        self._on_reassign(None)

    def _drop_bounced(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """ISR members registered since the state was written restarted unseen: they leave
        those ISRs and lead no more (finding 8, docs/fault-suite.md). The partitions changed."""
        ctx = self._context()
        affected = [tp for tp in partitions if ctx.bounced(tp)]
        if affected:
            bounced = sorted({b for tp in affected for b in ctx.bounced(tp)})
            log.info(
                "controller: brokers %s re-registered unseen (%d ISRs)", bounced, len(affected)
            )
        decide = functools.partial(on_bounced, unclean_allowed=self._unclean_allowed)
        return self._decide(decide, affected) if affected else []

    # --- reading the store --------------------------------------------------------------

    def _registered(self) -> list[int]:
        return sorted(int(c) for c in self.store.children(layout.BROKER_IDS))

    def _registration(self, broker_id: int) -> layout.BrokerRegistration | None:
        """`/brokers/ids/N` as it is now (None: not registered)."""
        try:
            node = self.store.get(layout.broker_path(broker_id))
        except NoNodeError:
            return None
        reg = layout.BrokerRegistration.from_json(broker_id, node.data)
        return dataclasses.replace(reg, broker_epoch=node.czxid)

    def _add_broker(self, broker_id: int) -> bool:
        reg = self._registration(broker_id)
        if reg is None:
            return False
        self._context().live[broker_id] = reg
        endpoint = reg.endpoints[0]
        self.channel.add(broker_id, (endpoint.host, endpoint.port), reg.broker_epoch)
        return True

    def _read_topic(self, name: str) -> list[TopicPartition]:
        """(Re)read a topic's assignment and states; its partitions not seen before."""
        ctx = self._context()
        self._watch(layout.topic_path(name), "topic", name)
        try:
            data = self.store.get(layout.topic_path(name)).data
            assignment = layout.TopicAssignment.from_json(data)
        except NoNodeError:
            return []
        known = ctx.topics.get(name)
        before = set() if known is None else set(known.assignment)
        ctx.topics[name] = TopicInfo(
            assignment.topic_id,
            assignment.partitions,
            assignment.adding_replicas,
            assignment.removing_replicas,
        )
        existing = partition_nodes(self.store, name) or set()  # one call, not one per partition
        found = self.store.get_many(
            [layout.partition_state_path(name, i) for i in assignment.partitions if i in existing]
        )
        for index in assignment.partitions:
            self._keep_state((name, index), found.get(layout.partition_state_path(name, index)))
        return [(name, p) for p in sorted(assignment.partitions) if p not in before]

    def _read_state(self, tp: TopicPartition) -> None:
        try:
            node: Node | None = self.store.get(layout.partition_state_path(*tp))
        except NoNodeError:
            node = None
        self._keep_state(tp, node)

    def _keep_state(self, tp: TopicPartition, node: Node | None) -> None:
        """Remember a partition's state node as read (None: it has none)."""
        ctx = self._context()
        if node is None:
            ctx.states.pop(tp, None)
            ctx.written_at.pop(tp, None)
        else:
            ctx.states[tp] = (layout.PartitionState.from_json(node.data), node.version)
            ctx.written_at[tp] = node.mzxid

    def _unclean_allowed(self, topic: str) -> bool:
        default = bool(self.broker.config["unclean.leader.election.enable"])
        try:
            config = layout.topic_config_from_json(
                self.store.get(layout.topic_config_path(topic)).data
            )
        except NoNodeError:
            return default
        value = config.get("unclean.leader.election.enable")
        return default if value is None else value.strip().lower() == "true"

    # --- writing states -----------------------------------------------------------------

    def _elect_offline(
        self, ctx: ControllerContext, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, layout.PartitionState]:
        return elect_offline(ctx, partitions, self._unclean_allowed)

    def _decide(
        self, decide: Decide, partitions: Collection[TopicPartition]
    ) -> list[TopicPartition]:
        """Apply a decision and write it; partitions that raced with a leader's ISR write
        are re-read and decided again. The partitions whose state changed."""
        ctx = self._context()
        changed: list[TopicPartition] = []
        pending = list(partitions)
        for _ in range(5):
            conflicts = self._write(decide(ctx, pending))
            changed += [tp for tp in pending if tp not in conflicts]
            if not conflicts:
                break
            for tp in conflicts:
                self._read_state(tp)
            pending = conflicts
        return [tp for tp in changed if tp in ctx.states]

    def _write(self, states: dict[TopicPartition, layout.PartitionState]) -> list[TopicPartition]:
        """Write partition states (`state_writes.write_states`); the partitions whose write
        conflicted."""
        return write_states(self.store, self.broker_id, self._context(), self.epoch_version, states)

    def _check_epoch(self) -> None:
        check_epoch(self.store, self.epoch_version)

    # --- telling brokers ----------------------------------------------------------------

    def _send_metadata(
        self,
        brokers: Iterable[int],
        partitions: Iterable[TopicPartition],
        deleted: Iterable[TopicPartition] = (),
    ) -> None:
        request = requests.update_metadata(
            self._context(), self.broker_id, partitions, deleted=deleted
        )
        for broker_id in brokers:
            self.channel.send(broker_id, request)

    def _send_leader_and_isr(
        self,
        partitions: Iterable[TopicPartition],
        *,
        only: Collection[int] | None = None,
        new: Mapping[TopicPartition, Collection[int]] | None = None,
    ) -> None:
        """LeaderAndIsr to the live replicas of `partitions` (or those of `only`); the
        replicas `new` names are told their partition is new (`is_new`: a broker with an
        offline log directory creates only those, as Kafka's)."""
        ctx = self._context()
        by_broker: dict[tuple[int, bool], list[TopicPartition]] = {}
        for tp in partitions:
            for replica in ctx.replicas(tp):
                if replica in ctx.live and (only is None or replica in only):
                    is_new = new is not None and replica in new.get(tp, ())
                    by_broker.setdefault((replica, is_new), []).append(tp)
        for (broker_id, is_new), tps in by_broker.items():
            request = requests.leader_and_isr(ctx, self.broker_id, tps, is_new=is_new)
            sent = self.channel.send(broker_id, request)
            sent.add_done_callback(functools.partial(self.log_dir_failures.answered, broker_id))

    def _announce(self, changed: list[TopicPartition]) -> None:
        """LeaderAndIsr to the replicas of changed partitions, UpdateMetadata to all."""
        if changed:
            self._send_leader_and_isr(changed)
            self._send_metadata(self._context().live, changed)

    # --- events -------------------------------------------------------------------------

    def _on_brokers(self, _arg: object) -> None:
        ctx = self._context()
        self._watch(layout.BROKER_IDS, "brokers")
        now = set(self._registered())
        bounced = {b for b in now & set(ctx.live) if self._registration_changed(b)}
        dead = (set(ctx.live) - now) | bounced
        for broker_id in dead:
            ctx.live.pop(broker_id, None)
            ctx.shutting_down.discard(broker_id)
            ctx.offline_on.pop(broker_id, None)  # a new registration reports afresh
            self.channel.remove(broker_id)
        if dead:
            log.info("controller: brokers %s left", sorted(dead))
            unclean = self._unclean_allowed
            self._announce(
                self._decide(lambda c, _ps: on_brokers_failed(c, dead, unclean), ctx.partitions())
            )
            self._send_metadata(ctx.live, [])
        born = [b for b in now - set(ctx.live) if self._add_broker(b)]
        if born:
            log.info("controller: brokers %s joined", sorted(born))
            self._send_metadata(set(ctx.live) - set(born), [])
            self._send_metadata(born, ctx.partitions())
            mine = [tp for tp in ctx.partitions() if any(b in ctx.replicas(tp) for b in born)]
            self._announce(self._drop_bounced(mine))  # before they hear they lead
            self._send_leader_and_isr(mine, only=born)
            self._announce(self._decide(self._elect_offline, mine))
        if dead or born:
            self.reassignments.progress()

    def _registration_changed(self, broker_id: int) -> bool:
        """Another broker epoch (KIP-380): gone and back between two looks (one event)."""
        reg = self._registration(broker_id)
        if reg is None:
            return True
        return reg.broker_epoch != self._context().live[broker_id].broker_epoch

    def _on_topics(self, _arg: object) -> None:
        ctx = self._context()
        self._watch(layout.TOPICS, "topics")
        names = set(self.store.children(layout.TOPICS))
        for name in sorted(names - set(ctx.topics)):
            self._on_topic(name)
        for name in set(ctx.topics) - names:  # removed behind our back
            ctx.topics.pop(name, None)

    def _on_topic(self, name: object) -> None:
        assert isinstance(name, str)
        ctx = self._context()
        new = self._read_topic(name)
        if not new:
            return
        log.info("controller: topic %s gets %d new partitions", name, len(new))
        self._decide(
            lambda c, ps: {tp: s for tp, s in initial_states(c, name).items() if tp in ps}, new
        )
        self._send_metadata(ctx.live, new)
        self._send_leader_and_isr(new, new={tp: ctx.replicas(tp) for tp in new})

    def _on_isr_change(self, _arg: object) -> None:
        self._watch(layout.ISR_CHANGE_NOTIFICATION, "isr_change")
        changed: set[TopicPartition] = set()
        for child in self.store.children(layout.ISR_CHANGE_NOTIFICATION):
            path = f"{layout.ISR_CHANGE_NOTIFICATION}/{child}"
            try:
                raw = json.loads(self.store.get(path).data)
                self.store.delete(path)
            except (NoNodeError, ValueError):
                continue
            changed |= {(p["topic"], int(p["partition"])) for p in raw.get("partitions", [])}
        ctx = self._context()
        known = sorted(tp for tp in changed if tp[0] in ctx.topics)
        for tp in known:
            self._read_state(tp)
        if known:
            self._send_metadata(ctx.live, known)
            self.reassignments.progress(known)

    def _on_log_dir_event(self, _arg: object) -> None:
        self.log_dir_failures.on_event()

    def _on_reassign(self, _arg: object) -> None:
        self.reassignments.on_change()

    def _on_delete_topics(self, _arg: object) -> None:
        ctx = self._context()
        self._watch(layout.DELETE_TOPICS, "delete_topics")
        for name in self.store.children(layout.DELETE_TOPICS):
            partitions = ctx.partitions_of(name)
            if partitions:
                log.info("controller: deleting topic %s", name)
                ctx.deleting.add(name)
                for broker_id in ctx.live:
                    mine = [tp for tp in partitions if broker_id in ctx.replicas(tp)]
                    if mine:
                        self.channel.send(
                            broker_id, requests.stop_replica(ctx, self.broker_id, mine, delete=True)
                        )
                self._send_metadata(ctx.live, [], deleted=partitions)
            with contextlib.suppress(NoNodeError):
                self.store.delete(layout.topic_path(name), recursive=True)
            with contextlib.suppress(NoNodeError):
                self.store.delete(layout.topic_config_path(name))
            with contextlib.suppress(NoNodeError):
                self.store.delete(f"{layout.DELETE_TOPICS}/{name}")
            ctx.topics.pop(name, None)
            ctx.deleting.discard(name)
            for tp in partitions:
                ctx.states.pop(tp, None)

    def _on_call(self, work: Callable[[], None]) -> None:
        work()

    def _on_shutdown(self, arg: object) -> None:
        assert isinstance(arg, tuple)
        broker_id: int = arg[0]
        done: asyncio.Future[list[TopicPartition]] = arg[1]
        ctx = self._context()
        if broker_id in ctx.live:
            ctx.shutting_down.add(broker_id)
            changed = self._decide(
                lambda c, _ps: move_leadership_off(c, broker_id), ctx.partitions_on(broker_id)
            )
            self._announce(changed)
        remaining = [
            tp
            for tp in ctx.partitions_on(broker_id)
            if (s := ctx.state(tp)) is not None
            and s.leader == broker_id
            and len(ctx.replicas(tp)) > 1
        ]
        if not done.done():
            done.set_result(remaining)
