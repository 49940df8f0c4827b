"""Replaying `__consumer_offsets` with transactional offset commits in it (KIP-98).

A transactional producer's offset commits are records of transactional batches; they count
only once the producer's commit marker follows, and never if an abort marker does. `feed`
takes the partition's batches in log order and returns the (key, value) pairs that are
committed by then — plain records at once, a transaction's records at its commit marker;
`open` holds, per producer id, the pairs of transactions with no marker yet (the loader
keeps them pending until their marker arrives).
"""

from __future__ import annotations

from riverlog.protocol.records.v2 import CONTROL_COMMIT, RecordBatch, control_record_type

Pair = tuple[bytes | None, bytes | None]


class TxnReplay:
    def __init__(self) -> None:
        self.open: dict[int, list[Pair]] = {}

    def feed(self, batch: RecordBatch) -> list[Pair]:
        header = batch.header
        if header.is_control:
            buffered = self.open.pop(header.producer_id, [])
            committed = bool(batch.records) and (
                control_record_type(batch.records[0]) == CONTROL_COMMIT
            )
            return buffered if committed else []
        pairs = [(r.key, r.value) for r in batch.records]
        if header.is_transactional:
            self.open.setdefault(header.producer_id, []).extend(pairs)
            return []
        return pairs
