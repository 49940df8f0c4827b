"""The inter-broker fence against the metadata store: who the controller is, at which
epoch, and each broker's epoch (its registration's czxid)."""

from __future__ import annotations

from riverlog.metadata import layout
from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol import error_codes
from riverlog.server.controller.controller_election import controller_json
from riverlog.server.fencing import ControllerFence


def _cluster() -> tuple[EmbeddedStore, int]:
    store = EmbeddedStore(None)
    store.create(layout.CONTROLLER_EPOCH, b"4")
    store.create(layout.CONTROLLER, controller_json(2, 0), ephemeral=True)
    store.create(layout.broker_path(1), b"{}", ephemeral=True)
    store.create(layout.broker_path(2), b"{}", ephemeral=True)
    return store, store.get(layout.broker_path(1)).czxid


def test_only_the_controller_of_record_is_obeyed() -> None:
    store, epoch_of_1 = _cluster()
    fence = ControllerFence(store, 1)
    assert fence.from_controller(2, 4, epoch_of_1) is error_codes.NONE
    stale = error_codes.STALE_CONTROLLER_EPOCH
    assert fence.from_controller(2, 3, epoch_of_1) is stale  # a deposed controller
    assert fence.from_controller(2, 99, epoch_of_1) is stale  # a made-up, higher epoch
    assert fence.from_controller(7, 4, epoch_of_1) is stale  # not the controller
    assert fence.from_controller(2, 4, epoch_of_1) is error_codes.NONE  # still obeyed


def test_requests_for_another_registration_are_stale() -> None:
    store, epoch_of_1 = _cluster()
    fence = ControllerFence(store, 1)
    stale = error_codes.STALE_BROKER_EPOCH
    assert fence.from_controller(2, 4, -1) is stale  # no broker epoch (old versions)
    assert fence.from_controller(2, 4, epoch_of_1 + 1000) is stale
    store.delete(layout.broker_path(1))
    store.create(layout.broker_path(1), b"{}", ephemeral=True)  # re-registered
    renewed = store.get(layout.broker_path(1)).czxid
    assert renewed > epoch_of_1
    assert fence.from_controller(2, 4, epoch_of_1) is stale  # meant for the old one
    assert fence.from_controller(2, 4, renewed) is error_codes.NONE


def test_a_new_controller_is_obeyed_once_the_store_names_it() -> None:
    store, epoch_of_1 = _cluster()
    fence = ControllerFence(store, 1)
    assert fence.from_controller(2, 4, epoch_of_1) is error_codes.NONE
    store.delete(layout.CONTROLLER)
    store.create(layout.CONTROLLER, controller_json(1, 0), ephemeral=True)
    store.set(layout.CONTROLLER_EPOCH, b"5")
    assert fence.from_controller(1, 5, epoch_of_1) is error_codes.NONE
    assert fence.from_controller(2, 4, epoch_of_1) is error_codes.STALE_CONTROLLER_EPOCH


def test_controlled_shutdown_needs_the_brokers_own_epoch() -> None:
    store, epoch_of_1 = _cluster()
    fence = ControllerFence(store, 2)
    assert fence.shutdown_request(1, epoch_of_1) is error_codes.NONE
    assert fence.shutdown_request(1, 42) is error_codes.STALE_BROKER_EPOCH
    assert fence.shutdown_request(1, -1) is error_codes.STALE_BROKER_EPOCH
    assert fence.shutdown_request(9, 42) is error_codes.BROKER_NOT_AVAILABLE
