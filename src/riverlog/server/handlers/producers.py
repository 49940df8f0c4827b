"""Producer ids: InitProducerId (idempotent producers).

Producer ids come in blocks reserved in the metadata store (`/latest_producer_id_block`, as
Kafka's ZooKeeper mode does), so ids are unique across restarts and, later, across brokers.
A producer re-initialising with its id and epoch (KIP-360) gets the next epoch of the same id.
With a transactional id the transaction coordinator answers (`handlers/transactions.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from riverlog.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from riverlog.server.dispatch import RequestContext
from riverlog.server.handlers.transactions import init_transactional_producer_id

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

MAX_EPOCH = 32767


def handle_init_producer_id(
    broker: Broker, ctx: RequestContext
) -> InitProducerIdResponse | Awaitable[InitProducerIdResponse]:
    request = ctx.request.body
    assert isinstance(request, InitProducerIdRequest)
    if request.transactional_id is not None:
        return init_transactional_producer_id(broker, ctx, request)
    if request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return InitProducerIdResponse(
            producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
        )
    return InitProducerIdResponse(producer_id=broker.producer_ids.next(), producer_epoch=0)
