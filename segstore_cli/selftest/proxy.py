"""A TCP proxy the self-tester puts between two processes of its cluster, to cut them apart (a network partition).

:class:`TcpProxy` listens on a free loopback port (bound to 0, then read) and forwards every connection to its
target, byte for byte, both ways. :meth:`TcpProxy.cut` partitions:

- ``drop``: every open connection is reset (aborted) and every new one is reset as soon as it is accepted, as when
  a firewall rejects the peer;
- ``blackhole``: the connections stay open but nothing goes through either way, and a new connection is accepted
  but not connected onward, as when packets are lost: the bytes are held (TCP would retransmit them) and flow again,
  in order, after :meth:`TcpProxy.heal`, unless a side gave up and closed first.

Invariants: bytes are forwarded in order and never altered or dropped while a connection lives; a connection whose
one side closes is closed on the other side too; :meth:`TcpProxy.stop` closes the listener and every connection.
"""

from __future__ import annotations

import asyncio
import contextlib

CHUNK = 64 * 1024
MODES = ("drop", "blackhole")


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: str | None = None
        """None (forwarding), ``drop`` or ``blackhole``."""
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, where clients connect."""
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self, mode: str) -> None:
        """Partition (see the module docstring) until :meth:`heal`."""
        if mode not in MODES:
            raise ValueError(f"mode: one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self._open.clear()
        if mode == "drop":
            for writer in list(self._connections):
                _abort(writer)

    def heal(self) -> None:
        self.mode = None
        self._open.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            _abort(writer)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self.mode == "drop":
            _abort(client_writer)
            return
        self._connections.add(client_writer)
        try:
            await self._open.wait()
            if client_writer.is_closing():
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            except OSError:
                _abort(client_writer)
                return
            self._connections.add(upstream_writer)
            try:
                pipes = [
                    asyncio.ensure_future(self._pipe(client_reader, upstream_writer)),
                    asyncio.ensure_future(self._pipe(upstream_reader, client_writer)),
                ]
                self._tasks.update(pipes)
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                    self._tasks.discard(pipe)
                self._connections.discard(upstream_writer)
                _close(upstream_writer)
        finally:
            self._connections.discard(client_writer)
            _close(client_writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(CHUNK):
                await self._open.wait()  # blackholed: held, in order
                if writer.is_closing():
                    return
                writer.write(data)
                await writer.drain()


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()


def _close(writer: asyncio.StreamWriter) -> None:
    if not writer.is_closing():
        writer.close()
