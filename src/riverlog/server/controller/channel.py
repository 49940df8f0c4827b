"""The controller's connections to brokers: one ordered request queue per broker.

Requests to one broker go out one at a time in the order the controller queued them (a
LeaderAndIsr must not overtake the UpdateMetadata queued before it); each waits for its
response, whose per-partition errors are logged — the controller's decisions do not wait on
brokers. A broken connection is reopened and the request retried until the broker is
removed (it left the cluster) or the channel stops (this broker stopped being controller).
A request the broker refuses as from a stale controller or for a stale registration is
resent too, after the same pause: a broker that cannot reach ZooKeeper cannot confirm a new
controller and refuses it (`server/fencing.py`), and without a resend it kept its old
leaders until some later request (long run seed 1605: a broker cut from ZooKeeper for a
second believed itself a partition's leader for minutes). A deposed controller's channel is
stopped when it resigns, and a re-registered broker gets a new queue, so the resending ends.
Each request queued is written to the state-change log. Each request goes out carrying
the broker epoch (KIP-380) of the registration the controller read for its broker: a broker
refuses requests meant for an earlier registration of its id (`server/fencing.py`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Collection

from riverlog.client.connection import PLAINTEXT, Connection
from riverlog.client.security import ClientSecurity
from riverlog.protocol import error_codes
from riverlog.protocol.api import ApiMessage
from riverlog.server import state_change_log
from riverlog.server.background import BackgroundLoop, stop_all

log = logging.getLogger(__name__)

RETRY_S = 0.3
RESENT_ON = frozenset(
    (error_codes.STALE_CONTROLLER_EPOCH.code, error_codes.STALE_BROKER_EPOCH.code)
)
"""Top-level refusals that may mean "cannot confirm now" (see the module docstring)."""
REQUEST_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class _BrokerQueue(BackgroundLoop):
    def __init__(
        self,
        broker_id: int,
        address: tuple[str, int],
        client_id: str,
        security: ClientSecurity,
        broker_epoch: int,
    ) -> None:
        self.broker_id = broker_id
        self.security = security
        self.address = address
        self.broker_epoch = broker_epoch
        self.client_id = client_id
        self.queue: asyncio.Queue[tuple[ApiMessage, asyncio.Future[ApiMessage | None]]] = (
            asyncio.Queue()
        )
        super().__init__()

    async def _run(self) -> None:
        conn: Connection | None = None
        done: asyncio.Future[ApiMessage | None] | None = None
        resending = False  # the current request was refused once already (logged)
        try:
            while not self.stopped:
                request, done = await self.queue.get()
                request = self._for_this_broker(request)
                while not self.stopped:
                    try:
                        if conn is None or conn.closed:
                            conn = await Connection.open(
                                *self.address, client_id=self.client_id, security=self.security
                            )
                        async with asyncio.timeout(REQUEST_TIMEOUT_S):
                            response = await conn.send(request)
                        refused = getattr(response, "error_code", 0)
                        if refused in RESENT_ON:
                            if not resending:
                                log.info(
                                    "controller → broker %d: %s refused (%s); resending",
                                    self.broker_id,
                                    type(request).__name__,
                                    error_codes.for_code(refused).name,
                                )
                            resending = True
                            await asyncio.sleep(RETRY_S)
                            continue
                        resending = False
                        if not done.done():
                            done.set_result(response)
                        break
                    except (ConnectionError, OSError, TimeoutError) as e:
                        log.info("controller → broker %d: %r, retrying", self.broker_id, e)
                        if conn is not None:
                            await conn.close()
                        conn = None
                        await asyncio.sleep(RETRY_S)
        finally:
            if conn is not None:
                await conn.close()
            if done is not None and not done.done():
                done.set_result(None)
            while not self.queue.empty():
                _, done = self.queue.get_nowait()
                if not done.done():
                    done.set_result(None)

    def _for_this_broker(self, request: ApiMessage) -> ApiMessage:
        """`request` with this broker's epoch (a copy: one request may go to many)."""
        if getattr(request, "broker_epoch", self.broker_epoch) == self.broker_epoch:
            return request
        stamped = copy.copy(request)
        stamped.broker_epoch = self.broker_epoch  # type: ignore[attr-defined]
        return stamped


class ControllerChannel:
    def __init__(self, controller_id: int, security: ClientSecurity = PLAINTEXT) -> None:
        self.client_id = f"controller-{controller_id}"
        self.security = security
        self._queues: dict[int, _BrokerQueue] = {}

    def add(self, broker_id: int, address: tuple[str, int], broker_epoch: int) -> None:
        current = self._queues.get(broker_id)
        if current is not None and (current.address, current.broker_epoch) == (
            address,
            broker_epoch,
        ):
            return
        self.remove(broker_id)
        self._queues[broker_id] = _BrokerQueue(
            broker_id, address, self.client_id, self.security, broker_epoch
        )

    def remove(self, broker_id: int) -> None:
        queue = self._queues.pop(broker_id, None)
        if queue is not None:
            queue.stop()

    def keep_only(self, broker_ids: Collection[int]) -> None:
        for broker_id in set(self._queues) - set(broker_ids):
            self.remove(broker_id)

    def send(self, broker_id: int, request: ApiMessage) -> asyncio.Future[ApiMessage | None]:
        """Queue `request` for `broker_id`; the future gets the response (None if the
        broker went away first)."""
        done: asyncio.Future[ApiMessage | None] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(broker_id)
        if queue is None:
            done.set_result(None)
        else:
            state_change_log.request_sent(broker_id, request)
            queue.queue.put_nowait((request, done))
        return done

    async def stop(self) -> None:
        queues, self._queues = list(self._queues.values()), {}
        await stop_all(queues, STOP_TIMEOUT_S)
