"""Byte-level fakes for client unit tests: a scripted transport and a tiny segment store behind it.

:class:`FakePeer` is the server end of one fake connection: it decodes the bytes the client writes
(real codec), records the commands, answers ``Hello``, and lets a test push reply frames back, whole or
one byte at a time. Replies are delivered on a later loop turn, as a socket would. :class:`FakeStore`
is a handler that keeps segments in memory and answers appends the way the Pravega server does
(``AppendSetup`` with the writer's last event number, cumulative ``DataAppended``, dedup of resent
events), with hooks to hold acks or drop the connection mid-load.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from segment_store.client.config import ConnectionConfig
from segment_store.client.connection import Connection, Endpoint
from segment_store.protocol import (
    NULL_ATTRIBUTE_VALUE,
    Append,
    AppendAssembler,
    AppendSetup,
    DataAppended,
    FrameDecoder,
    Hello,
    NoSuchSegment,
    ReadSegment,
    SegmentIsSealed,
    SegmentRead,
    SetupAppend,
    WireCommand,
    encode,
    local_hello,
)

Handler = Callable[["FakePeer", WireCommand], None]


class FakeTransport(asyncio.Transport):
    """Hands the client's writes to a FakePeer; close/abort report the loss on the next loop turn."""

    def __init__(self, peer: FakePeer) -> None:
        super().__init__()
        self.peer = peer
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closed:
            self.peer.received(bytes(data))

    def close(self) -> None:
        self._lose(None)

    def abort(self) -> None:
        self._lose(None)

    def is_closing(self) -> bool:
        return self.closed

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def _lose(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.peer.on_closed()
            asyncio.get_running_loop().call_soon(self.peer.protocol.connection_lost, exc)


class FakePeer:
    """The server side of one scripted connection."""

    def __init__(self, handler: Handler | None = None, hello: Hello | None = None) -> None:
        self.handler = handler
        self.hello = hello if hello is not None else local_hello()
        self.decoder = FrameDecoder()
        self.assembler = AppendAssembler()
        self.commands: list[WireCommand] = []
        self.protocol: Connection
        self.transport: FakeTransport
        self.closed = False

    def attach(self, protocol: Connection) -> None:
        self.protocol = protocol
        self.transport = FakeTransport(self)
        protocol.connection_made(self.transport)

    def received(self, data: bytes) -> None:
        self.decoder.feed(data)
        for command in self.decoder:
            if self.closed:
                return  # dropped while handling an earlier frame of this write: the rest never arrived
            self.commands.append(command)
            if isinstance(command, Hello):
                if self.hello is not None:
                    self.reply(self.hello)
                continue
            if self.handler is not None:
                self.handler(self, command)

    def on_closed(self) -> None:
        self.closed = True

    def reply(self, command: WireCommand, byte_by_byte: bool = False) -> None:
        self.send_bytes(encode(command), byte_by_byte)

    def send_bytes(self, data: bytes, byte_by_byte: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if byte_by_byte:
            for i in range(len(data)):
                loop.call_soon(self._deliver, data[i : i + 1])
        else:
            loop.call_soon(self._deliver, data)

    def _deliver(self, data: bytes) -> None:
        if not self.closed:
            self.protocol.data_received(data)

    def drop(self) -> None:
        """The network fails: the client sees the connection lost (reset)."""
        if not self.closed:
            self.closed = True
            self.transport.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, ConnectionResetError("reset"))

    def sent(self, kind: type[WireCommand]) -> list[WireCommand]:
        return [c for c in self.commands if isinstance(c, kind)]


class FakeNetwork:
    """A connection factory for ConnectionPool: each new connection gets a FakePeer made by ``handler``."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler = handler
        self.peers: list[FakePeer] = []
        self.refuse = 0  # refuse this many connection attempts (then accept)

    async def connect(self, endpoint: Endpoint, config: ConnectionConfig) -> Connection:
        from segment_store.client.errors import ConnectionLostError

        if self.refuse > 0:
            self.refuse -= 1
            raise ConnectionLostError("refused", endpoint)
        connection = Connection(endpoint, config)
        peer = FakePeer(self.handler)
        self.peers.append(peer)
        peer.attach(connection)
        await connection.handshake()
        return connection


@dataclass
class FakeSegment:
    data: bytearray = field(default_factory=bytearray)
    writers: dict[uuid.UUID, int] = field(default_factory=dict)
    sealed: bool = False


class FakeStore:
    """Segments in memory behind FakePeers, answering like the Pravega server (see module docstring).

    ``hold_acks``: store appends but send no DataAppended (they are released by :meth:`release`).
    ``drop_after_blocks``: drop the connection after storing this many more blocks (their acks lost).
    """

    def __init__(self) -> None:
        self.segments: dict[str, FakeSegment] = {}
        self.hold_acks = False
        self.held: list[tuple[FakePeer, DataAppended]] = []
        self.drop_after_blocks: int | None = None
        self.blocks: list[Append] = []
        self.read_reply_limit: int | None = None
        self.duplicates = 0

    def create(self, name: str) -> FakeSegment:
        return self.segments.setdefault(name, FakeSegment())

    def events(self, name: str) -> list[bytes]:
        from segment_store.protocol import parse_events

        return [e.data for e in parse_events(bytes(self.segments[name].data))]

    def release(self) -> None:
        held, self.held = self.held, []
        for peer, ack in held:
            peer.reply(ack)

    def __call__(self, peer: FakePeer, command: WireCommand) -> None:
        item = peer.assembler.process(command)
        if item is None:
            return
        if isinstance(item, SetupAppend):
            segment = self.segments.get(item.segment)
            if segment is None:
                peer.reply(NoSuchSegment(item.request_id, item.segment, "", -1))
                return
            last = segment.writers.get(item.writer_id, NULL_ATTRIBUTE_VALUE)
            peer.reply(AppendSetup(item.request_id, item.segment, item.writer_id, last))
        elif isinstance(item, Append):
            self._append(peer, item)
        elif isinstance(item, ReadSegment):
            self._read(peer, item)

    def _append(self, peer: FakePeer, append: Append) -> None:
        segment = self.segments[append.segment]
        if segment.sealed:
            peer.reply(SegmentIsSealed(append.request_id, append.segment, "", append.event_number))
            return
        previous = segment.writers.get(append.writer_id, NULL_ATTRIBUTE_VALUE)
        if append.event_number <= previous:
            self.duplicates += 1  # already stored (the real server acks or closes; this one counts it)
            return
        segment.data += append.data
        segment.writers[append.writer_id] = append.event_number
        self.blocks.append(append)
        ack = DataAppended(append.writer_id, append.event_number, previous, append.request_id, len(segment.data))
        if self.drop_after_blocks is not None:
            self.drop_after_blocks -= 1
            if self.drop_after_blocks <= 0:
                self.drop_after_blocks = None
                peer.drop()
                return
        if self.hold_acks:
            self.held.append((peer, ack))
        else:
            peer.reply(ack)

    def _read(self, peer: FakePeer, read: ReadSegment) -> None:
        segment = self.segments[read.segment]
        length = read.suggested_length
        if self.read_reply_limit is not None:
            length = min(length, self.read_reply_limit)
        data = bytes(segment.data[read.offset : read.offset + length])
        end = read.offset + len(data)
        at_tail = end >= len(segment.data)
        eos = segment.sealed and read.offset >= len(segment.data)
        if not data and not segment.sealed:
            return  # a tail read: the test decides when (and whether) it is answered
        peer.reply(SegmentRead(read.segment, read.offset, at_tail, eos, data, read.request_id))
