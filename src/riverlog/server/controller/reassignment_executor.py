"""The controller's partition reassignments: `/admin/reassign_partitions` in, steps out.

Owns the targets read from `/admin/reassign_partitions` (Kafka's JSON, written by the
AlterPartitionReassignments handler on any broker or by tools) and which moves were started
in this controller's term. The steps are decided in `controller/reassignment.py`; here they
are written and told to brokers, through the controller service's version-checked writes and
request channels:

- Start: the topic znode (AR = OAR + RAR with adding/removing replicas) and the partitions'
  bumped states in one multi-op checked against the controller epoch, then LeaderAndIsr to
  all of AR and StopReplica (delete) to replicas an earlier target added but this one drops;
- Elect: the new leader's state, then LeaderAndIsr to all of AR;
- Complete: the shrunk ISR, LeaderAndIsr naming AR = RAR to RAR, StopReplica (delete) to
  OAR - RAR, and last the topic znode with AR = RAR;
- Done: the entry leaves `/admin/reassign_partitions` (the node goes when none is left).

Runs on the controller's event queue: `on_change` when the node changes (and at failover),
`progress` when ISRs change or brokers come and go. A write that raced another writer re-reads
and decides again. Runs on the event loop thread only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from riverlog.controller import requests
from riverlog.controller.reassignment import (
    Assignment,
    Complete,
    Done,
    Elect,
    Start,
    Step,
    Wait,
    invalid_target,
    next_step,
)
from riverlog.metadata import layout
from riverlog.metadata.store import (
    BadVersionError,
    CheckOp,
    NoNodeError,
    Op,
    SetOp,
)
from riverlog.model import TopicPartition

if TYPE_CHECKING:
    from riverlog.server.controller.service import ControllerService

log = logging.getLogger(__name__)

MAX_ROUNDS = 6  # Start, Elect, Complete, Done and retries after a raced write


class Reassignments:
    def __init__(self, service: ControllerService) -> None:
        self.service = service
        self.store = service.store
        self.targets: dict[TopicPartition, list[int]] = {}
        self._started: set[tuple[TopicPartition, tuple[int, ...]]] = set()

    def reset(self) -> None:
        """A new term (or a re-read of the cluster): every move is started again."""
        self.targets.clear()
        self._started.clear()

    # --- reading the targets ------------------------------------------------------------

    def on_change(self) -> None:
        """`/admin/reassign_partitions` changed (or the controller just took over)."""
        ctx = self.service.ctx
        assert ctx is not None
        self.service._watch(layout.REASSIGN_PARTITIONS, "reassign")
        try:
            wanted = layout.reassignments_from_json(self.store.get(layout.REASSIGN_PARTITIONS).data)
        except NoNodeError:
            wanted = {}
        except ValueError as e:
            log.error("controller: ignoring unreadable %s: %s", layout.REASSIGN_PARTITIONS, e)
            return
        registered = self._registered()
        valid: dict[TopicPartition, list[int]] = {}
        invalid: dict[TopicPartition, list[int]] = {}
        for tp, target in wanted.items():
            # Brokers must be registered when a move starts (as in Kafka before KIP-455); a
            # move under way waits for a target broker that is down (restarting, say).
            if not ctx.replicas(tp) or tp[0] in ctx.deleting:
                problem: str | None = f"{tp[0]}-{tp[1]} does not exist"
            else:
                under_way = self._assignment(tp).moving and self._assignment(tp).target == target
                problem = invalid_target(target, set(target) if under_way else registered)
            if problem is None:
                valid[tp] = target
            else:
                invalid[tp] = target
                log.error(
                    "controller: reassignment of %s-%d to %s dropped: %s",
                    tp[0],
                    tp[1],
                    target,
                    problem,
                )
        for tp in ctx.partitions():  # a move whose entry went away is cancelled
            moving = self._assignment(tp)
            if moving.moving and tp not in valid:
                valid[tp] = moving.origin
        for tp in set(self.targets) - set(valid):
            log.info("controller: reassignment of %s-%d withdrawn", *tp)
        self.targets = valid
        if invalid:
            self._forget(invalid)
        self.progress(list(valid))

    def _registered(self) -> set[int]:
        return {int(c) for c in self.store.children(layout.BROKER_IDS)}

    # --- moving partitions --------------------------------------------------------------

    def progress(self, partitions: list[TopicPartition] | None = None) -> None:
        """Take each of `partitions` (None: all) with a pending move as far as it goes now."""
        pending = sorted(
            self.targets if partitions is None else {tp for tp in partitions if tp in self.targets}
        )
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in pending:
            by_topic.setdefault(tp[0], []).append(tp)
        done: dict[TopicPartition, list[int]] = {}
        for topic, tps in by_topic.items():
            for _ in range(MAX_ROUNDS):
                steps = {tp: self._step(tp) for tp in tps}
                done |= {tp: self.targets[tp] for tp, s in steps.items() if isinstance(s, Done)}
                for tp, s in steps.items():
                    if isinstance(s, Wait):
                        log.debug("controller: reassignment of %s-%d waits: %s", *tp, s.reason)
                tps = [tp for tp, s in steps.items() if not isinstance(s, Wait | Done)]
                if not tps:
                    break
                self._apply(topic, {tp: steps[tp] for tp in tps})
        if done:
            for tp, target in sorted(done.items()):
                log.info("controller: reassignment of %s-%d to %s completed", tp[0], tp[1], target)
            self._forget(done)

    def _step(self, tp: TopicPartition) -> Step:
        ctx = self.service.ctx
        assert ctx is not None
        target = self.targets[tp]
        return next_step(
            self._assignment(tp),
            target,
            ctx.state(tp),
            ctx.usable(),
            ctx.epoch,
            started=(tp, tuple(target)) in self._started,
        )

    def _assignment(self, tp: TopicPartition) -> Assignment:
        ctx = self.service.ctx
        assert ctx is not None
        info = ctx.topics[tp[0]]
        return Assignment(
            list(info.assignment.get(tp[1], [])),
            list(info.adding.get(tp[1], [])),
            list(info.removing.get(tp[1], [])),
        )

    def _apply(self, topic: str, steps: dict[TopicPartition, Step]) -> None:
        starts = {tp: s for tp, s in steps.items() if isinstance(s, Start)}
        elects = {tp: s.state for tp, s in steps.items() if isinstance(s, Elect)}
        completes = {tp: s for tp, s in steps.items() if isinstance(s, Complete)}
        if starts:
            self._start(topic, starts)
        if elects:
            self._elect(elects)
        if completes:
            self._complete(topic, completes)

    def _start(self, topic: str, starts: dict[TopicPartition, Start]) -> None:
        service, ctx = self.service, self.service.ctx
        assert ctx is not None
        ops: list[Op] = [
            SetOp(layout.partition_state_path(*tp), s.state.to_json(), ctx.version(tp))
            for tp, s in starts.items()
        ]
        if not self._write_topic(topic, {tp[1]: s.assignment for tp, s in starts.items()}, ops):
            return
        for tp, s in starts.items():
            ctx.written(tp, s.state)
            self._started.add((tp, tuple(self.targets[tp])))
            log.info(
                "controller: reassigning %s-%d: replicas %s (adding %s, removing %s), "
                "leader %d, ISR %s",
                tp[0],
                tp[1],
                s.assignment.replicas,
                s.assignment.adding,
                s.assignment.removing,
                s.state.leader,
                s.state.isr,
            )
        changed = list(starts)
        service._send_leader_and_isr(
            changed, new={tp: s.assignment.adding for tp, s in starts.items()}
        )
        self._stop_and_delete({tp: s.dropped for tp, s in starts.items()})
        service._send_metadata(ctx.live, changed)

    def _elect(self, elects: dict[TopicPartition, layout.PartitionState]) -> None:
        service, ctx = self.service, self.service.ctx
        assert ctx is not None
        conflicts = service._write(elects)
        changed = [tp for tp in elects if tp not in conflicts]
        for tp in changed:
            log.info(
                "controller: reassignment of %s-%d moves leadership to %d",
                tp[0],
                tp[1],
                elects[tp].leader,
            )
        self._reread(conflicts)
        service._send_leader_and_isr(changed)
        service._send_metadata(ctx.live, changed)

    def _complete(self, topic: str, completes: dict[TopicPartition, Complete]) -> None:
        service, ctx = self.service, self.service.ctx
        assert ctx is not None
        conflicts = service._write(
            {tp: c.state for tp, c in completes.items() if c.state is not None}
        )
        self._reread(conflicts)
        ready = {tp: c for tp, c in completes.items() if tp not in conflicts}
        if not ready:
            return
        info = ctx.topics[topic]
        for (_, index), c in ready.items():  # AR = RAR in the controller's view first
            info.assignment[index] = list(c.assignment.replicas)
        service._send_leader_and_isr(list(ready))
        self._stop_and_delete({tp: c.removed for tp, c in ready.items()})
        if not self._write_topic(topic, {tp[1]: c.assignment for tp, c in ready.items()}, []):
            return
        service._send_metadata(ctx.live, list(ready))

    def _stop_and_delete(self, removed: dict[TopicPartition, list[int]]) -> None:
        service, ctx = self.service, self.service.ctx
        assert ctx is not None
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp, brokers in removed.items():
            for broker_id in brokers:
                by_broker.setdefault(broker_id, []).append(tp)
        for broker_id, tps in sorted(by_broker.items()):
            if broker_id in ctx.live:
                service.channel.send(
                    broker_id, requests.stop_replica(ctx, service.broker_id, tps, delete=True)
                )

    def _reread(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.service._read_state(tp)

    def _write_topic(self, topic: str, changes: dict[int, Assignment], ops: list[Op]) -> bool:
        """Write the topic znode with `changes`, together with `ops`, checked against the
        controller epoch and the topic node's version; on a race, re-read the topic (the
        next round decides again). Whether it was written."""
        service, ctx = self.service, self.service.ctx
        assert ctx is not None
        path = layout.topic_path(topic)
        try:
            node = self.store.get(path)
            stored = layout.TopicAssignment.from_json(node.data)
            partitions, adding = dict(stored.partitions), dict(stored.adding_replicas)
            removing = dict(stored.removing_replicas)
            for index, a in changes.items():
                partitions[index] = list(a.replicas)
                adding.pop(index, None)
                removing.pop(index, None)
                if a.moving:
                    adding[index], removing[index] = list(a.adding), list(a.removing)
            data = layout.TopicAssignment(stored.topic_id, partitions, adding, removing).to_json()
            self.store.multi(
                [
                    CheckOp(layout.CONTROLLER_EPOCH, service.epoch_version),
                    SetOp(path, data, node.version),
                    *ops,
                ]
            )
        except (BadVersionError, NoNodeError):
            service._check_epoch()
            log.info("controller: topic %s changed meanwhile; deciding again", topic)
            service._read_topic(topic)
            return False
        info = ctx.topics[topic]
        info.assignment, info.adding, info.removing = partitions, adding, removing
        return True

    # --- finishing ----------------------------------------------------------------------

    def _forget(self, finished: dict[TopicPartition, list[int]]) -> None:
        """Take finished (or invalid) entries out of `/admin/reassign_partitions` —
        version-checked, as tools and handlers write it too, and only if no writer gave the
        partition another target since; the node goes when none is left."""
        for tp, target in finished.items():
            if self.targets.get(tp) == target:
                del self.targets[tp]
        for _ in range(10):
            try:
                node = self.store.get(layout.REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                wanted = layout.reassignments_from_json(node.data)
            except ValueError:
                wanted = {}
            left = {tp: r for tp, r in wanted.items() if finished.get(tp) != r}
            try:
                if left:
                    self.store.set(
                        layout.REASSIGN_PARTITIONS,
                        layout.reassignments_json(left),
                        expected_version=node.version,
                    )
                else:
                    self.store.delete(layout.REASSIGN_PARTITIONS, expected_version=node.version)
                return
            except (BadVersionError, NoNodeError):
                continue
        log.warning("controller: could not update %s", layout.REASSIGN_PARTITIONS)
