"""Instructions a broker spends per transaction, counted by callgrind: the same produce
requests sent by an idempotent producer and by a transactional one, the difference being
what a transaction costs the broker (AddPartitionsToTxn, EndTxn, the `__transaction_state`
writes, the markers and their appends, LSO and producer-state upkeep).

A unit is one Produce request (acks=all) with a batch of `--records` 1 KiB records for each
of 3 partitions; for the transactional producer it is wrapped in a transaction of its own:
AddPartitionsToTxn (v3, as clients send it) for the 3 partitions, the Produce, EndTxn
(commit). The next transaction's AddPartitionsToTxn meets CONCURRENT_TRANSACTIONS until the
coordinator has written the markers and CompleteCommit; it is retried after 5 ms (clients
wait 20 ms) and the retries are counted. Requests are sent one at a time over one
connection by riverlog's client, from this process (`bench/callgrind_requests.py` runs the
broker under callgrind and subtracts N from 3N units).

    python bench/callgrind_transactions.py [--units 100] [--records 64] [--keep DIR]

Prints instructions per unit for each producer and their difference per transaction.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from callgrind_requests import per_unit

from riverlog.client.admin import AsyncAdmin
from riverlog.client.connection import Connection, connect_any
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.records.v2 import Record, encode_batch

TOPIC = "load"
PARTITIONS = 3
RETRY_S = 0.005
_RETRIABLE = {
    error_codes.COORDINATOR_LOAD_IN_PROGRESS.code,
    error_codes.COORDINATOR_NOT_AVAILABLE.code,
    error_codes.NOT_COORDINATOR.code,
    error_codes.CONCURRENT_TRANSACTIONS.code,
}


@dataclass
class Producer:
    """One producer's identity and sequences, kept across the runs of one broker."""

    transactional_id: str | None
    records: int
    producer_id: int = -1
    epoch: int = -1
    sequences: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    retries: int = 0

    async def _until_ok(self, conn: Connection, request: ApiMessage, version: int) -> object:
        while True:
            response = await conn.send(request, version)
            code = getattr(response, "error_code", 0)
            if code not in _RETRIABLE:
                assert code == 0, (type(response).__name__, code)
                return response
            await asyncio.sleep(RETRY_S)

    def prepare(self, bootstrap: str) -> None:
        asyncio.run(self._identify(bootstrap))
        self.run(bootstrap, 10)  # warm-up, not instrumented

    async def _identify(self, bootstrap: str) -> None:
        async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
            await admin.create_topic(TOPIC, PARTITIONS, 1)
        conn = await connect_any(bootstrap, client_id="callgrind-txn")
        try:
            if self.transactional_id is not None:
                await self._until_ok(
                    conn, m.FindCoordinatorRequest(key=self.transactional_id, key_type=1), 3
                )
            response = await self._until_ok(
                conn,
                m.InitProducerIdRequest(
                    transactional_id=self.transactional_id, transaction_timeout_ms=60_000
                ),
                4,
            )
            assert isinstance(response, m.InitProducerIdResponse)
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        finally:
            await conn.close()

    def run(self, bootstrap: str, units: int) -> None:
        asyncio.run(self._units(bootstrap, units))

    async def _units(self, bootstrap: str, units: int) -> None:
        conn = await connect_any(bootstrap, client_id="callgrind-txn")
        try:
            for _ in range(units):
                await self._unit(conn)
        finally:
            await conn.close()

    async def _unit(self, conn: Connection) -> None:
        transactional = self.transactional_id is not None
        if transactional:
            await self._add_partitions(conn)
        now = int(time.time() * 1000)
        value = b"x" * 1024
        partitions = []
        for index in range(PARTITIONS):
            batch = encode_batch(
                [Record(i, now, None, value) for i in range(self.records)],
                producer_id=self.producer_id,
                producer_epoch=self.epoch,
                base_sequence=self.sequences[index],
                is_transactional=transactional,
            )
            self.sequences[index] += self.records
            partitions.append(m.ProduceRequest.PartitionProduceData(index=index, records=batch))
        produce = m.ProduceRequest(
            transactional_id=self.transactional_id,
            acks=-1,
            timeout_ms=30_000,
            topic_data=[m.ProduceRequest.TopicProduceData(name=TOPIC, partition_data=partitions)],
        )
        response = await conn.send(produce, 9)
        assert isinstance(response, m.ProduceResponse)
        codes = [p.error_code for t in response.responses for p in t.partition_responses]
        assert codes == [0] * PARTITIONS, codes
        if transactional:
            end = m.EndTxnRequest(
                transactional_id=self.transactional_id or "",
                producer_id=self.producer_id,
                producer_epoch=self.epoch,
                committed=True,
            )
            await self._until_ok(conn, end, 3)

    async def _add_partitions(self, conn: Connection) -> None:
        request = m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id or "",
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[
                m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                    name=TOPIC, partitions=list(range(PARTITIONS))
                )
            ],
        )
        while True:
            response = await conn.send(request, 3)
            assert isinstance(response, m.AddPartitionsToTxnResponse)
            codes = {
                p.partition_error_code
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            }
            if codes == {0}:
                return
            assert codes == {error_codes.CONCURRENT_TRANSACTIONS.code}, codes
            self.retries += 1
            await asyncio.sleep(RETRY_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=100, help="N")
    parser.add_argument("--records", type=int, default=64, help="1 KiB records per batch")
    parser.add_argument("--keep", help="directory for the callgrind files")
    options = parser.parse_args()
    out_dir = Path(options.keep or tempfile.mkdtemp(prefix="callgrind-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, transactional_id in (("idempotent", None), ("transactional", "callgrind-txn")):
        producer = Producer(transactional_id, options.records)
        results[name] = per_unit([], out_dir, producer.prepare, producer.run, options.units)
        retried = f" ({producer.retries} AddPartitionsToTxn retries)" if transactional_id else ""
        print(f"  {name:<14} {results[name]:12,.0f} instructions per unit{retried}", flush=True)
    idempotent, transactional = results.values()
    print(f"  a transaction costs {transactional - idempotent:,.0f} instructions more")
    print(f"  callgrind files in {out_dir}")


if __name__ == "__main__":
    main()
