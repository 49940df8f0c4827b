"""The controller's side of KIP-112: a broker's log directory failed.

The broker writes `/log_dir_event_notification/log_dir_event_N` (Kafka's JSON); the
controller (`on_event`, on its event queue) deletes the notifications and sends those brokers
LeaderAndIsr for all their partitions. Every LeaderAndIsr answer (`answered`, hooked onto
each one the controller sends) is read for KAFKA_STORAGE_ERROR partitions: those replicas are
offline on that broker (`ControllerContext.offline_on`), and `controller/context.py`'s
`on_replicas_offline` decides — other leaders where it led, out of the other ISRs — written
and announced like every decision. A replica already known offline is not acted on again
(the LeaderAndIsr announcing the change gets the same answer). The marks go when the broker
registers anew.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from riverlog.controller.context import on_replicas_offline
from riverlog.metadata import layout
from riverlog.metadata.store import NoNodeError
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.messages import LeaderAndIsrResponse

if TYPE_CHECKING:
    from riverlog.server.controller.service import ControllerService

log = logging.getLogger(__name__)

STORAGE_ERROR = error_codes.KAFKA_STORAGE_ERROR.code


class LogDirFailures:
    def __init__(self, controller: ControllerService) -> None:
        self.controller = controller

    def on_event(self) -> None:
        """Brokers whose log directory failed: LeaderAndIsr for all their partitions; their
        answers (`answered`) name the replicas now offline."""
        c = self.controller
        ctx = c._context()
        c._watch(layout.LOG_DIR_EVENT_NOTIFICATION, "log_dir_event")
        brokers: set[int] = set()
        for child in sorted(c.store.children(layout.LOG_DIR_EVENT_NOTIFICATION)):
            path = f"{layout.LOG_DIR_EVENT_NOTIFICATION}/{child}"
            try:
                broker_id = layout.log_dir_event_broker(c.store.get(path).data)
                c.store.delete(path)
            except NoNodeError:
                continue
            if broker_id is not None:
                brokers.add(broker_id)
        for broker_id in sorted(brokers & set(ctx.live)):
            log.info("controller: a log directory of broker %d failed", broker_id)
            c._send_leader_and_isr(ctx.partitions_on(broker_id), only=[broker_id])

    def answered(self, broker_id: int, done: asyncio.Future[ApiMessage | None]) -> None:
        """A LeaderAndIsr answer: its KAFKA_STORAGE_ERROR partitions are offline there."""
        c = self.controller
        response = None if done.cancelled() else done.result()
        if not isinstance(response, LeaderAndIsrResponse) or c.ctx is None:
            return
        names = {info.topic_id: name for name, info in c.ctx.topics.items()}
        failed = [
            (e.topic_name, e.partition_index)
            for e in response.partition_errors
            if e.error_code == STORAGE_ERROR
        ] + [
            (names[t.topic_id], e.partition_index)
            for t in response.topics
            if t.topic_id in names
            for e in t.partition_errors
            if e.error_code == STORAGE_ERROR
        ]
        if failed:
            c.submit(lambda: self._offline(broker_id, failed))

    def _offline(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        c = self.controller
        ctx = c._context()
        if broker_id not in ctx.live:
            return
        already = ctx.offline_on.setdefault(broker_id, set())
        known = [tp for tp in partitions if broker_id in ctx.replicas(tp) and tp not in already]
        if not known:  # (its answers to the LeaderAndIsr sent below say so again)
            return
        already.update(known)
        log.info(
            "controller: replicas of %s on broker %d are offline (failed log directory)",
            sorted(known),
            broker_id,
        )
        unclean = c._unclean_allowed
        changed = c._decide(lambda x, ps: on_replicas_offline(x, broker_id, ps, unclean), known)
        c._send_leader_and_isr(changed)
        c._send_metadata(ctx.live, known)
