"""Producer id allocation in blocks reserved in the metadata store.

`/latest_producer_id_block` holds Kafka's JSON (`{"version":1,"broker":B,"block_start":S,
"block_end":E}`); a broker reserves the next block of `BLOCK_SIZE` ids with a conditional
write (expected version), so concurrent brokers never get the same block, and hands ids out
of it in memory. Ids are never reused across restarts.
"""

from __future__ import annotations

import json

from riverlog.metadata import layout
from riverlog.metadata.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, store: MetadataStore, broker_id: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self._next = 0
        self._end = -1  # inclusive end of the current block

    def next(self) -> int:
        if self._next > self._end:
            self._reserve()
        value = self._next
        self._next += 1
        return value

    def _reserve(self) -> None:
        while True:
            try:
                node = self.store.get(layout.PRODUCER_ID_BLOCK)
            except NoNodeError:
                start, version = 0, -1
            else:
                start, version = json.loads(node.data)["block_end"] + 1, node.version
            block = {
                "version": 1,
                "broker": self.broker_id,
                "block_start": start,
                "block_end": start + BLOCK_SIZE - 1,
            }
            data = json.dumps(block).encode()
            try:
                if version < 0:
                    self.store.create(layout.PRODUCER_ID_BLOCK, data)
                else:
                    self.store.set(layout.PRODUCER_ID_BLOCK, data, expected_version=version)
            except (BadVersionError, NodeExistsError):
                continue  # another broker took this block: try the next one
            self._next, self._end = start, start + BLOCK_SIZE - 1
            return
