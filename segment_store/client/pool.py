"""A pool of multiplexed connections per segment store endpoint.

Each connection carries any number of concurrent requests and append sessions, so the pool hands out
shared connections: :meth:`ConnectionPool.get` returns the least loaded live connection to the endpoint,
and opens a new one only while every existing one is busy and fewer than ``max_connections_per_endpoint``
exist. Dead connections (failed, closed by either side) are dropped as soon as they die and never
handed out again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from segment_store.client.config import ConnectionConfig, PoolConfig
from segment_store.client.connection import Connection, Endpoint, open_connection
from segment_store.client.errors import ClientClosedError

ConnectionFactory = Callable[[Endpoint, ConnectionConfig], Awaitable[Connection]]


class ConnectionPool:
    """Bounded, shared connections per endpoint. Use from one event loop; :meth:`close` ends them all."""

    def __init__(
        self,
        config: ConnectionConfig | None = None,
        pool_config: PoolConfig | None = None,
        connect: ConnectionFactory = open_connection,
    ) -> None:
        self.config = config or ConnectionConfig()
        self.pool_config = pool_config or PoolConfig()
        self._connect = connect
        self._connections: dict[Endpoint, list[Connection]] = {}
        self._locks: dict[Endpoint, asyncio.Lock] = {}
        self._closed = False

    def connections(self, endpoint: Endpoint) -> list[Connection]:
        """The live connections to ``endpoint`` (a copy)."""
        return [c for c in self._connections.get(endpoint, ()) if c.is_open]

    def _pick(self, endpoint: Endpoint) -> Connection | None:
        live = self.connections(endpoint)
        self._connections[endpoint] = live
        if not live:
            return None
        best = min(live, key=lambda c: c.load)
        if best.load == 0 or len(live) >= self.pool_config.max_connections_per_endpoint:
            return best
        return None

    async def get(self, endpoint: Endpoint) -> Connection:
        """A live connection to ``endpoint``. Raises ConnectionLostError if none can be opened,
        ClientClosedError after :meth:`close`."""
        if self._closed:
            raise ClientClosedError("the connection pool is closed")
        connection = self._pick(endpoint)
        if connection is not None:
            return connection
        lock = self._locks.setdefault(endpoint, asyncio.Lock())
        async with lock:
            connection = self._pick(endpoint)
            if connection is not None:
                return connection
            connection = await self._connect(endpoint, self.config)
            if self._closed:
                connection.close()
                raise ClientClosedError("the connection pool is closed")
            self._connections.setdefault(endpoint, []).append(connection)
            return connection

    def discard(self, connection: Connection) -> None:
        """Close ``connection`` and forget it (after a reply stream that made no sense, say)."""
        connection.close()
        live = self._connections.get(connection.endpoint)
        if live is not None and connection in live:
            live.remove(connection)

    async def close(self) -> None:
        """Close every connection; later :meth:`get` calls raise ClientClosedError. Idempotent."""
        self._closed = True
        every = [c for group in self._connections.values() for c in group]
        self._connections.clear()
        for connection in every:
            connection.close()
        for connection in every:
            await connection.wait_closed()
