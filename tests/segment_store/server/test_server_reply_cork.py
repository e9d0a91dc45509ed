"""Replies of one connection written in one turn of the event loop go out in one socket write, in order."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from segment_store.protocol import DataAppended, FrameDecoder, KeepAlive, SegmentRead, WireCommand, encode
from segment_store.protocol.cork import CORK_BYTES
from segment_store.server.config import ServerConfig
from segment_store.server.connection import FlowTracker, ServerConnection

pytestmark = pytest.mark.integration


class RecordingTransport(asyncio.Transport):
    """Keeps every ``write`` (decoded into commands) and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[WireCommand]] = []
        self.closed = False

    def write(self, data: Any) -> None:
        decoder = FrameDecoder()
        decoder.feed(bytes(data))
        self.writes.append(list(decoder))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


def _connection() -> tuple[ServerConnection, RecordingTransport]:
    config = ServerConfig(port=0)
    connection = ServerConnection(None, None, FlowTracker(config), config)  # type: ignore[arg-type]
    transport = RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


def _ack(n: int) -> DataAppended:
    return DataAppended(uuid.UUID(int=1), n, n - 1, n, n * 10)


async def test_replies_in_one_turn_go_out_in_one_write_in_order() -> None:
    connection, transport = _connection()
    for n in (1, 2, 3):
        connection.send(_ack(n))
    assert transport.writes == []
    await asyncio.sleep(0)
    assert transport.writes == [[_ack(1), _ack(2), _ack(3)]]
    connection.send(KeepAlive())
    await asyncio.sleep(0)
    assert transport.writes[1:] == [[KeepAlive()]]
    connection.connection_lost(None)


async def test_replies_of_cork_bytes_go_out_at_once_behind_the_queued_ones() -> None:
    connection, transport = _connection()
    connection.send(_ack(1))
    big = SegmentRead("s", 0, False, False, bytes(CORK_BYTES), 7)
    assert len(encode(big)) >= CORK_BYTES
    connection.send(big)
    assert transport.writes == [[_ack(1), big]]  # the transport sees it now: its buffer limits apply
    connection.connection_lost(None)


async def test_close_sends_the_queued_replies_first() -> None:
    connection, transport = _connection()
    connection.send(_ack(1))
    connection.close()
    assert transport.writes == [[_ack(1)]] and transport.closed
    await asyncio.sleep(0)
    assert len(transport.writes) == 1  # the scheduled flush finds nothing more
    connection.connection_lost(None)
