"""A TCP proxy on 127.0.0.1 that a test can freeze: bytes stop flowing both ways until it thaws.

It stands between a process and a server (ZooKeeper) to cut that process's traffic without touching the
server or the other clients: the connections stay open, nothing arrives, as on a partitioned network.
The proxy runs its own event loop in a daemon thread; ``freeze``/``thaw`` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from segstore_shared.coordination.zookeeper_server import free_port


class FreezableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="freezable-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FreezableProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def freeze(self) -> None:
        """Stop forwarding (bytes already sent may still arrive; nothing more does)."""
        assert self._flowing is not None
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def thaw(self) -> None:
        assert self._flowing is not None
        self._loop.call_soon_threadsafe(self._flowing.set)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:  # the connections' pumps: end them before the loop goes
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pump(client_reader, server_writer), self._pump(server_reader, client_writer), return_exceptions=True
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
