"""Producer ids: InitProducerId (idempotent producers).

Producer ids come in blocks reserved in the metadata store (`/latest_producer_id_block`, as
Kafka's ZooKeeper mode does), so ids are unique across restarts and, later, across brokers.
A producer re-initialising with its id and epoch (KIP-360) gets the next epoch of the same id.
Transactional ids wait for the transaction coordinator: until then they are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

MAX_EPOCH = 32767


def handle_init_producer_id(broker: Broker, ctx: RequestContext) -> InitProducerIdResponse:
    request = ctx.request.body
    assert isinstance(request, InitProducerIdRequest)
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            error_code=error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code,
            producer_id=-1,
            producer_epoch=-1,
        )
    if request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return InitProducerIdResponse(
            producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
        )
    return InitProducerIdResponse(producer_id=broker.producer_ids.next(), producer_epoch=0)
