"""Fencing of the inter-broker APIs: only the controller the metadata store names is obeyed.

LeaderAndIsr, UpdateMetadata and StopReplica (controller → broker) are obeyed only when
- their controller id and epoch are those of `/controller` and `/controller_epoch` now: an
  older epoch is a deposed controller (STALE_CONTROLLER_EPOCH, as Kafka), and a made-up id
  or a *higher* epoch than the store holds is a forgery — refused the same way, so it
  neither changes a partition nor raises the epoch the broker then expects;
- their broker epoch (KIP-380) is this broker's, the czxid of its `/brokers/ids/N`
  registration: a request for an earlier registration of this broker id is stale, any
  other value forged (STALE_BROKER_EPOCH). Request versions without the field (-1) are
  refused too: riverlog's controller always sends it.
ControlledShutdown (broker → controller) must carry the broker epoch of the registration of
the broker it names (STALE_BROKER_EPOCH; BROKER_NOT_AVAILABLE for a broker not registered).

The pair (controller id, epoch) and the broker epoch last confirmed in the store are
cached, so the real controller's requests cost no store read, and dropped when a watch
says `/controller_epoch` or the registration changed; any other value is checked against
the store before it is answered. (Every election sets `/controller_epoch`, so watching it
covers `/controller` too.) A request refused here changes nothing; its
refusal is one log line naming the sender. What this cannot stop is a client that copies
the real controller's id and epochs (readable from the cluster): that needs the
`ClusterAction` ACL, which comes with authorization.

Invariant: `check` runs first in each of the four handlers, before any state is touched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

from riverlog.metadata import layout
from riverlog.metadata.store import MetadataStore, NoNodeError, StoreUnavailableError
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import ErrorCode
from riverlog.server.controller.controller_election import controller_epoch, controller_id

if TYPE_CHECKING:
    from riverlog.server.broker import Broker
    from riverlog.server.dispatch import RequestContext

log = logging.getLogger(__name__)

FromController = m.LeaderAndIsrRequest | m.UpdateMetadataRequest | m.StopReplicaRequest


class ControllerFence:
    """What one broker checks inter-broker requests against; used on the event loop."""

    def __init__(self, store: MetadataStore, broker_id: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self._controller: tuple[int, int] | None = None
        """(controller id, epoch) last confirmed in the store; None once either changed."""
        self._broker_epoch: int | None = None
        """This broker's registration czxid, last read; None once the node changed."""
        self._watching_controller = False
        self._watching_registration = False

    def from_controller(self, controller: int, epoch: int, broker_epoch: int) -> ErrorCode:
        """NONE when a request with these fields comes from the controller of record."""
        if (controller, epoch) != self._controller:
            try:
                self._watch_controller()  # armed before the read: no change goes unseen
                current_epoch, _ = controller_epoch(self.store)
                current = controller_id(self.store)
            except StoreUnavailableError:
                return error_codes.STALE_CONTROLLER_EPOCH  # cannot confirm: refuse
            if (controller, epoch) != (current, current_epoch):
                return error_codes.STALE_CONTROLLER_EPOCH
            self._controller = (controller, epoch)
        if broker_epoch < 0:
            return error_codes.STALE_BROKER_EPOCH
        if broker_epoch != self._broker_epoch:
            try:
                self._watch_registration()
            except StoreUnavailableError:
                return error_codes.STALE_BROKER_EPOCH  # cannot confirm: refuse
            self._broker_epoch = self._registration_epoch(self.broker_id)
            if broker_epoch != self._broker_epoch:
                return error_codes.STALE_BROKER_EPOCH
        return error_codes.NONE

    def shutdown_request(self, broker_id: int, broker_epoch: int) -> ErrorCode:
        """NONE when a ControlledShutdown names a registered broker with its epoch."""
        epoch = self._registration_epoch(broker_id)
        if epoch is None:
            return error_codes.BROKER_NOT_AVAILABLE
        return error_codes.NONE if broker_epoch == epoch else error_codes.STALE_BROKER_EPOCH

    def _registration_epoch(self, broker_id: int) -> int | None:
        try:
            return self.store.get(layout.broker_path(broker_id)).czxid
        except (NoNodeError, StoreUnavailableError):
            return None

    # Watches fire once, on the store's thread: they only drop a cached value (one
    # assignment), and are re-armed at the next read — at most one armed per node, however
    # many forged requests make the fence read.

    def _watch_controller(self) -> None:
        if not self._watching_controller:
            self._watching_controller = True
            try:
                self.store.watch(layout.CONTROLLER_EPOCH, self._controller_changed)
            except BaseException:
                self._watching_controller = False
                raise

    def _controller_changed(self, _path: str) -> None:
        self._watching_controller = False
        self._controller = None

    def _watch_registration(self) -> None:
        if not self._watching_registration:
            self._watching_registration = True
            try:
                self.store.watch(layout.broker_path(self.broker_id), self._registration_changed)
            except BaseException:
                self._watching_registration = False
                raise

    def _registration_changed(self, _path: str) -> None:
        self._watching_registration = False
        self._broker_epoch = None


R = TypeVar(
    "R",
    m.LeaderAndIsrResponse,
    m.UpdateMetadataResponse,
    m.StopReplicaResponse,
    m.ControlledShutdownResponse,
)


def check(broker: Broker, ctx: RequestContext, response: type[R]) -> R | None:
    """The refusal (a `response` with the error) when the request in `ctx` does not pass
    the fence, else None."""
    body = ctx.request.body
    if isinstance(body, m.ControlledShutdownRequest):
        error = broker.fence.shutdown_request(body.broker_id, body.broker_epoch)
        sender = f"broker {body.broker_id} epoch {body.broker_epoch}"
    else:
        assert isinstance(body, FromController)
        error = broker.fence.from_controller(
            body.controller_id, body.controller_epoch, body.broker_epoch
        )
        sender = (
            f"controller {body.controller_id} epoch {body.controller_epoch} broker "
            f"epoch {body.broker_epoch}"
        )
    if error is error_codes.NONE:
        return None
    peer = ctx.connection.peer if ctx.connection is not None else "?"
    log.warning("refused %s from %s (%s): %s", type(body).__name__, peer, sender, error.name)
    return response(error_code=error.code)
