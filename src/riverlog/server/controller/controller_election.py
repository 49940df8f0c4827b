"""Controller election through the metadata store, as ZooKeeper-era Kafka does it.

The controller is whichever broker holds the ephemeral `/controller` node
(`{"version":1,"brokerid":N,"timestamp":"ms"}`). Winning and bumping the controller epoch in
`/controller_epoch` happen in one multi-op — create `/controller`, set `/controller_epoch`
to epoch + 1 on the version just read — so two brokers can never both believe they won with
the same epoch; the epoch then fences a stale controller in every write and request.
A broker that loses watches `/controller` and runs again when it changes (the winner's
session ended, or it resigned). Watch callbacks arrive on the store's thread; `schedule`
moves the retry to the caller's thread (`loop.call_soon_threadsafe` for an event loop).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from riverlog.clock import SYSTEM_CLOCK, Clock
from riverlog.metadata import layout
from riverlog.metadata.store import (
    BadVersionError,
    CreateOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SetOp,
    StoreUnavailableError,
)

NO_CONTROLLER = -1


def controller_json(broker_id: int, timestamp_ms: int) -> bytes:
    return json.dumps(
        {"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)},
        separators=(",", ":"),
    ).encode()


def controller_id(store: MetadataStore) -> int:
    """The current controller's broker id, or -1 when there is none."""
    try:
        return int(json.loads(store.get(layout.CONTROLLER).data)["brokerid"])
    except NoNodeError:
        return NO_CONTROLLER


def controller_epoch(store: MetadataStore) -> tuple[int, int]:
    """(epoch, node version) of `/controller_epoch`; (0, -1) before any election."""
    try:
        node = store.get(layout.CONTROLLER_EPOCH)
    except NoNodeError:
        return 0, -1
    return int(node.data), node.version


class ControllerElection:
    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        on_elected: Callable[[int], None],
        *,
        schedule: Callable[[Callable[[], None]], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.clock = clock
        self.broker_id = broker_id
        self.on_elected = on_elected
        self.schedule = schedule or (lambda fn: fn())
        self.epoch: int | None = None
        """The controller epoch this broker won with, while it is the controller."""
        self.epoch_version = -1
        """`/controller_epoch`'s znode version after the win: the controller's writes
        check it, so they fail once another broker has won."""
        self._stopped = False
        self._unanswered = False
        """A registration attempt got no answer (the connection dropped): it may have won."""

    @property
    def is_controller(self) -> bool:
        return self.epoch is not None

    def elect(self) -> None:
        """Try to become the controller; otherwise watch `/controller` and try again when
        it changes. `on_elected(epoch)` is called on a win."""
        if self._stopped or self.is_controller:
            return
        with contextlib.suppress(StoreUnavailableError):  # no session now: the broker
            self._elect()  # runs `elect` again once it reconnects

    def _elect(self) -> None:
        current = controller_id(self.store)
        if current == self.broker_id and self._unanswered:
            # Won, but the answer was lost with the connection: the epoch was set in the
            # same multi-op, so it is ours. (Without an unanswered attempt, a `/controller`
            # naming this broker is a crashed predecessor's, gone when its session expires.)
            self._unanswered = False
            self.epoch, self.epoch_version = controller_epoch(self.store)
            self.on_elected(self.epoch)
            return
        if current == NO_CONTROLLER:
            epoch = self._try_register()
            if epoch is not None:
                self.epoch = epoch
                self.on_elected(epoch)
                return
        self.store.watch(layout.CONTROLLER, lambda _path: self.schedule(self.elect))
        if current == NO_CONTROLLER and not self.store.exists(layout.CONTROLLER):
            self._elect()  # the winner vanished before the watch was armed

    def _try_register(self) -> int | None:
        epoch, version = controller_epoch(self.store)
        if version < 0:
            with contextlib.suppress(NodeExistsError):
                self.store.create(layout.CONTROLLER_EPOCH, b"0")
            epoch, version = controller_epoch(self.store)
        self._unanswered = True
        try:
            self.store.multi(
                [
                    CreateOp(
                        layout.CONTROLLER,
                        controller_json(self.broker_id, self.clock.wall_ms()),
                        ephemeral=True,
                    ),
                    SetOp(layout.CONTROLLER_EPOCH, str(epoch + 1).encode(), version),
                ]
            )
        except (NodeExistsError, BadVersionError):
            self._unanswered = False
            return None  # another broker won this round
        self._unanswered = False
        self.epoch_version = version + 1
        return epoch + 1

    def abandon(self) -> None:
        """The session ended: whatever was ours in the store is gone; stop acting and
        stop running (a new session runs a new election)."""
        self._stopped = True
        self.epoch = None

    def resign(self) -> None:
        """Give up the controllership (controlled shutdown, lost session): delete
        `/controller` if it is still ours and stop running for election."""
        self._stopped = True
        if self.is_controller and controller_id(self.store) == self.broker_id:
            with contextlib.suppress(NoNodeError):
                self.store.delete(layout.CONTROLLER)
        self.epoch = None
