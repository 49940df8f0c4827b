"""Connections this broker opens to brokers (itself included) to send them requests as a
client: the transaction coordinator's markers to partition leaders, partition leaders'
verification requests to transaction coordinators (KIP-890).

One connection per broker id, opened on first use — one opening at a time per broker, so
requests wanting it together share it — to the address the cluster metadata gives (the
inter-broker listener's, registered first) with the inter-broker security; `drop` closes a
connection that failed so that the next use opens a new one. Each user keeps its own
`BrokerConnections`: one user's failure never cuts another's requests.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from riverlog.client.connection import Connection

if TYPE_CHECKING:
    from riverlog.server.broker import Broker


class BrokerConnections:
    def __init__(self, broker: Broker, client_id: str) -> None:
        self.broker = broker
        self.client_id = client_id
        self._connections: dict[int, Connection] = {}
        self._opening: dict[int, asyncio.Lock] = {}

    async def get(self, broker_id: int) -> Connection:
        """The open connection to `broker_id` (opened now if there is none); raises
        ConnectionError (broker unknown), OSError or TimeoutError."""
        async with self._opening.setdefault(broker_id, asyncio.Lock()):
            conn = self._connections.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            info = self.broker.metadata.brokers.get(broker_id)
            if info is None:
                raise ConnectionError(f"broker {broker_id} is not known")
            conn = await Connection.open(
                info.host,
                info.port,
                client_id=self.client_id,
                security=self.broker.security.inter_broker,
            )
            self._connections[broker_id] = conn
            return conn

    async def drop(self, broker_id: int) -> None:
        """Close the connection to `broker_id` (it failed): the next `get` opens another."""
        stale = self._connections.pop(broker_id, None)
        if stale is not None:
            await stale.close()

    async def close(self) -> None:
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()
