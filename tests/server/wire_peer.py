"""A raw wire-protocol peer for server tests: sends commands, collects replies (no client library logic)."""

from __future__ import annotations

import asyncio
import contextlib

from segment_store.protocol import FrameDecoder, Hello, encode, local_hello
from segment_store.protocol.registry import WireCommand


class WirePeer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.pending: list[WireCommand] = []

    @classmethod
    async def connect(cls, endpoint: tuple[str, int], hello: bool = True) -> WirePeer:
        reader, writer = await asyncio.open_connection(*endpoint)
        peer = cls(reader, writer)
        if hello:
            peer.send(local_hello())
            reply = await peer.receive()
            assert isinstance(reply, Hello), reply
        return peer

    def send(self, *commands: WireCommand) -> None:
        for command in commands:
            self.writer.write(encode(command))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def receive(self, timeout: float = 10.0) -> WireCommand:
        """The next reply; raises ConnectionError if the server closed the connection."""

        async def next_reply() -> WireCommand:
            while not self.pending:
                data = await self.reader.read(1 << 20)
                if not data:
                    raise ConnectionError("server closed the connection")
                self.decoder.feed(data)
                self.pending.extend(self.decoder)
            return self.pending.pop(0)

        return await asyncio.wait_for(next_reply(), timeout)

    async def request(self, command: WireCommand, timeout: float = 10.0) -> WireCommand:
        self.send(command)
        return await self.receive(timeout)

    async def closed_by_server(self, timeout: float = 5.0) -> bool:
        try:
            while True:
                await self.receive(timeout)
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
