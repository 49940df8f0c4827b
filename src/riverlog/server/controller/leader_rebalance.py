"""The controller's leader elections on demand and on schedule (the edge of
`controller/leader_balance.py`).

Three ways in, all run on the controller's event queue (`ControllerService.submit`), one at a
time with its other events:
- ElectLeaders requests (`elect`, from the handler): preferred or unclean elections for the
  given partitions (None: all), answered per partition;
- `/admin/preferred_replica_election` (Kafka's JSON, written by tools): watched from failover
  on; its preferred elections are held, then the node is deleted — a node found at failover
  is an election the previous controller did not finish, and is held then;
- with `auto.leader.rebalance.enable`, a check 5 s after failover and then every
  `leader.imbalance.check.interval.seconds`: preferred elections for the brokers whose leader
  imbalance is above `leader.imbalance.per.broker.percentage`.
Elections are written version-checked like every controller decision, then announced
(LeaderAndIsr to the replicas, UpdateMetadata to all brokers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from riverlog.controller import leader_balance
from riverlog.controller.leader_balance import PREFERRED, Outcome
from riverlog.metadata import layout
from riverlog.metadata.store import NoNodeError
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes

if TYPE_CHECKING:
    from riverlog.server.controller.service import ControllerService

log = logging.getLogger(__name__)

FIRST_CHECK_DELAY_S = 5.0  # Kafka's: the first imbalance check after failover


class LeaderRebalance:
    """Owned by the controller service; used on the event loop, its work on the queue."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service
        self._check: asyncio.TimerHandle | None = None

    def failover(self) -> None:
        """A controller term starts (or re-reads the cluster): watch the election node, hold a
        pending election, schedule the imbalance check."""
        self._on_election_node()
        self._schedule_check(FIRST_CHECK_DELAY_S)

    def stop(self) -> None:
        if self._check is not None:
            self._check.cancel()
            self._check = None

    def elect(
        self, partitions: list[TopicPartition] | None, election_type: int
    ) -> asyncio.Future[dict[TopicPartition, Outcome]]:
        """Queue elections of `election_type` (None: all partitions); the future gets each
        partition's outcome, or the controller's error (NotControllerError, store trouble)."""
        done: asyncio.Future[dict[TopicPartition, Outcome]] = (
            asyncio.get_running_loop().create_future()
        )

        def work() -> None:
            if done.done():  # the asker gave up
                return
            try:
                done.set_result(self.run(partitions, election_type))
            except Exception as e:
                done.set_exception(e)
                raise

        self.service.submit(work)
        return done

    def run(
        self, partitions: Iterable[TopicPartition] | None, election_type: int
    ) -> dict[TopicPartition, Outcome]:
        """Hold the elections now (on the queue); each partition's outcome."""
        service = self.service
        ctx = service._context()
        electable, answered = leader_balance.plan(ctx, partitions, election_type)
        if electable:
            changed = service._decide(
                lambda c, ps: leader_balance.decide(c, ps, election_type), electable
            )
            results = leader_balance.outcomes(ctx, electable, election_type)
            elected = [tp for tp in changed if results[tp].error is error_codes.NONE]
            service._announce(elected)
            if elected:
                log.info(
                    "controller: %s leader election for %s",
                    leader_balance.ELECTION_TYPES[election_type],
                    ", ".join(f"{t}-{p}" for t, p in elected),
                )
            answered.update(results)
        return answered

    # --- /admin/preferred_replica_election -------------------------------------------------

    def _on_election_node(self) -> None:
        service = self.service
        service._watch(layout.PREFERRED_REPLICA_ELECTION, "call", self._on_election_node)
        try:
            data = service.store.get(layout.PREFERRED_REPLICA_ELECTION).data
        except NoNodeError:
            return
        try:
            partitions = layout.preferred_replica_election_from_json(data)
        except ValueError as e:
            log.error("controller: ignoring %s: %s", layout.PREFERRED_REPLICA_ELECTION, e)
            partitions = []
        results = self.run(partitions, PREFERRED)
        failed = {
            tp: o
            for tp, o in results.items()
            if o.error not in (error_codes.NONE, error_codes.ELECTION_NOT_NEEDED)
        }
        for (topic, index), outcome in sorted(failed.items()):
            log.warning(
                "controller: preferred replica election for %s-%d failed: %s",
                topic,
                index,
                outcome.message or outcome.error.name,
            )
        with contextlib.suppress(NoNodeError):
            service.store.delete(layout.PREFERRED_REPLICA_ELECTION)

    # --- automatic leader rebalance ----------------------------------------------------------

    def _schedule_check(self, delay_s: float) -> None:
        self.stop()
        if self.service.broker.config["auto.leader.rebalance.enable"]:
            loop = asyncio.get_running_loop()
            self._check = loop.call_later(delay_s, self.service.submit, self._check_balance)

    def _check_balance(self) -> None:
        config = self.service.broker.config
        try:
            ctx = self.service._context()
            candidates = leader_balance.rebalance_candidates(
                ctx, config["leader.imbalance.per.broker.percentage"]
            )
            if candidates:
                log.info(
                    "controller: leader imbalance; preferred elections for %d partitions",
                    len(candidates),
                )
                self.run(candidates, PREFERRED)
        finally:
            self._schedule_check(config["leader.imbalance.check.interval.seconds"])
