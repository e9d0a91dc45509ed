"""Replies of one append session come in append order, even when a later append fails at once.

A failure known before anything is written (sealed, missing segment, wrong host, bad offset) must
not overtake the acks of earlier appends of the same writer that still wait for Tier-1: a client
that sees ``SegmentIsSealed`` treats every unacknowledged event as not stored and writes it to the
successor segment. Tier-1 acknowledgements are held (:mod:`held_tier1`) while the failing append
arrives, so each test reproduces the race deterministically.

Determinism: the pump submits appends of a connection in arrival order, and the durable log takes
them in that order; so once a *second* writer's append, sent after the failing one on the same
connection, shows in the pending metadata, the failing append's outcome is already known (its
callbacks are queued before any Tier-1 acknowledgement released afterwards).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from held_tier1 import HeldLogFactory, Tier1Gate
from wire_peer import WirePeer

from segment_store.containers.registry import ContainerRegistry
from segment_store.containers.segment_container import SegmentContainer
from segment_store.metadata import SegmentMetadata
from segment_store.protocol import (
    AppendSetup,
    ConditionalAppend,
    ConditionalCheckFailed,
    CreateSegment,
    DataAppended,
    DeleteSegment,
    Event,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    KeepAlive,
    NoSuchSegment,
    ReadSegment,
    SealSegment,
    SegmentAttribute,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentRead,
    SegmentSealed,
    SetupAppend,
    StreamSegmentInfo,
    WrongHost,
    build_append_block_end,
    encode_events,
)
from segment_store.protocol.registry import WireCommand
from segment_store.server.config import ServerConfig
from segment_store.server.connection import ServerConnection
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.memory import MemoryChunkStorage
from segstore_shared.contracts import NULL_ATTRIBUTE_VALUE, ContainerNotOwnedError

pytestmark = pytest.mark.integration

SEGMENT = "order/stream/0.#epoch.0"
OTHER = "order/stream/1.#epoch.0"  # one container: the same durable log as SEGMENT


@dataclass
class Env:
    service: SegmentStoreService
    gate: Tier1Gate
    peer: WirePeer  # the appending connection (both writers)
    admin: WirePeer  # requests: seal, delete, reads
    writer: uuid.UUID  # appends to SEGMENT: the session under test
    other: uuid.UUID  # appends to OTHER: the barrier
    other_event: int = 0

    def pending(self, name: str) -> SegmentMetadata | None:
        """The segment as the durable log sees it: every operation it took, durable or not."""
        return self.service.registry.for_segment(name).durable_log.updater.segment_by_name(name)

    def pending_length(self, name: str) -> int:
        segment = self.pending(name)
        assert segment is not None
        return segment.length

    async def barrier(self) -> None:
        """Once this append of the other writer is taken, every append sent before it was handled."""
        before = self.pending_length(OTHER)
        self.other_event += 1
        _, command = block(self.other, self.other_event, 1, request_id=900 + self.other_event)
        self.peer.send(command)
        await until(lambda: self.pending_length(OTHER) > before)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    gate = Tier1Gate()
    config = ServiceConfig(server=ServerConfig(port=0), container_count=1)
    service = SegmentStoreService(config, HeldLogFactory(gate), MemoryChunkStorage())
    await service.start()
    peer = admin = None
    try:
        admin = await WirePeer.connect(service.endpoint)
        peer = await WirePeer.connect(service.endpoint)
        e = Env(service, gate, peer, admin, uuid.uuid4(), uuid.uuid4())
        await set_up(e)
        yield e
    finally:
        gate.release()
        for p in (peer, admin):
            if p is not None:
                await p.close()
        await service.stop()


async def set_up(env: Env) -> None:
    for request_id, name in ((1, SEGMENT), (2, OTHER)):
        assert await env.admin.request(CreateSegment(request_id, name, 0, 0, "", 0)) == SegmentCreated(request_id, name)
    for request_id, writer, name in ((3, env.writer, SEGMENT), (4, env.other, OTHER)):
        reply = await env.peer.request(SetupAppend(request_id, writer, name, ""))
        assert reply == AppendSetup(request_id, name, writer, NULL_ATTRIBUTE_VALUE)


def block(writer: uuid.UUID, first_event: int, count: int, request_id: int) -> tuple[bytes, WireCommand]:
    payloads = [f"event-{first_event + i}".encode() for i in range(count)]
    end = build_append_block_end(writer, payloads, first_event + count - 1, request_id)
    return encode_events(payloads), end  # type: ignore[return-value]


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def send_held_blocks(env: Env, blocks: int) -> bytes:
    """``blocks`` appends of 5 events each (numbers 1..5*blocks), taken by the durable log, none durable."""
    env.gate.hold()
    sent = bytearray()
    for i in range(blocks):
        data, command = block(env.writer, 5 * i + 1, 5, request_id=10 + i)
        env.peer.send(command)
        sent += data
    await until(lambda: env.pending_length(SEGMENT) == len(sent))
    assert env.gate.held_count > 0
    return bytes(sent)


async def replies_until(peer: WirePeer, done: Callable[[list[WireCommand]], bool]) -> list[WireCommand]:
    replies: list[WireCommand] = []
    while not done(replies):
        replies.append(await peer.receive(timeout=5))
    return replies


def session_replies(env: Env, replies: list[WireCommand]) -> list[WireCommand]:
    """The replies of the session under test (the barrier writer's acks left out)."""
    return [r for r in replies if not (isinstance(r, DataAppended) and r.writer_id == env.other)]


def other_acked(env: Env, replies: list[WireCommand]) -> bool:
    return any(
        isinstance(r, DataAppended) and r.writer_id == env.other and r.event_number == env.other_event for r in replies
    )


def assert_acks_then(replies: list[WireCommand], failure: type[WireCommand], last_event: int) -> DataAppended:
    """Cumulative acks up to ``last_event`` (in order), then the failure; returns the last ack."""
    kinds = [type(r).__name__ for r in replies]
    assert len(kinds) > 1 and kinds == ["DataAppended"] * (len(kinds) - 1) + [failure.__name__], (
        f"replies out of append order: {kinds}"
    )
    acks = replies[:-1]
    numbers = [a.event_number for a in acks]  # type: ignore[attr-defined]
    assert numbers == sorted(numbers) and numbers[-1] == last_event, replies
    return acks[-1]  # type: ignore[return-value]


async def read_all(peer: WirePeer, name: str) -> bytes:
    info = await peer.request(GetStreamSegmentInfo(80, name, ""))
    assert isinstance(info, StreamSegmentInfo)
    data = bytearray()
    while len(data) < info.write_offset:
        reply = await peer.request(ReadSegment(name, len(data), 1 << 20, "", 81))
        assert isinstance(reply, SegmentRead), reply
        data += reply.data
    return bytes(data)


async def test_appends_with_seal_while_in_flight_ack_stored_events_before_sealed(env: Env) -> None:
    sent = await send_held_blocks(env, 3)  # events 1..15, waiting for Tier-1
    env.admin.send(SealSegment(50, SEGMENT, ""))
    await until(lambda: (s := env.pending(SEGMENT)) is not None and s.sealed)
    _, refused = block(env.writer, 16, 5, request_id=20)  # fails at once: the segment is sealed
    _, silent = block(env.writer, 21, 5, request_id=21)  # fails with it, answered by the same failure
    env.peer.send(refused, silent)
    await env.barrier()
    env.gate.release()

    replies = await replies_until(
        env.peer, lambda rs: other_acked(env, rs) and any(isinstance(r, SegmentIsSealed) for r in rs)
    )
    session = session_replies(env, replies)
    last = assert_acks_then(session, SegmentIsSealed, 15)
    assert session[-1] == SegmentIsSealed(20, SEGMENT, "", 20)
    assert await env.admin.receive() == SegmentSealed(50, SEGMENT)
    # what the writer saw acknowledged is exactly what the segment holds
    assert last.current_segment_write_offset == len(sent)
    assert await read_all(env.admin, SEGMENT) == sent
    attribute = await env.admin.request(GetSegmentAttribute(82, SEGMENT, env.writer, ""))
    assert attribute == SegmentAttribute(82, 15)
    assert await env.peer.request(KeepAlive()) == KeepAlive()  # nothing else for the refused appends


async def test_conditional_append_with_bad_offset_while_in_flight_answers_after_earlier_acks(env: Env) -> None:
    sent = await send_held_blocks(env, 1)  # events 1..5
    env.peer.send(ConditionalAppend(env.writer, 6, 0, Event(b"late"), 30))  # expected offset 0: wrong
    await env.barrier()
    env.gate.release()

    replies = await replies_until(
        env.peer, lambda rs: other_acked(env, rs) and any(isinstance(r, ConditionalCheckFailed) for r in rs)
    )
    assert_acks_then(session_replies(env, replies), ConditionalCheckFailed, 5)
    assert session_replies(env, replies)[-1] == ConditionalCheckFailed(env.writer, 6, 30)
    # nothing was stored for event 6: the writer's chain continues from event 5
    data, command = block(env.writer, 7, 2, request_id=31)
    reply = await env.peer.request(command)
    assert isinstance(reply, DataAppended) and (reply.event_number, reply.previous_event_number) == (8, 5), reply
    assert await read_all(env.admin, SEGMENT) == sent + data


async def test_appends_with_delete_while_in_flight_ack_before_no_such_segment(env: Env) -> None:
    await send_held_blocks(env, 2)  # events 1..10
    env.admin.send(DeleteSegment(60, SEGMENT, ""))
    await until(lambda: env.pending(SEGMENT) is None)
    _, missing = block(env.writer, 11, 5, request_id=40)  # refused when submitted: no such segment
    env.peer.send(missing)
    await env.barrier()
    env.gate.release()

    replies = await replies_until(
        env.peer, lambda rs: other_acked(env, rs) and any(isinstance(r, NoSuchSegment) for r in rs)
    )
    session = session_replies(env, replies)
    assert_acks_then(session, NoSuchSegment, 10)
    assert session[-1] == NoSuchSegment(40, SEGMENT, "", 15)
    assert await env.admin.receive() == SegmentDeleted(60, SEGMENT)


class MovingRegistry:
    """The service's registry, except that containers can be moved away on demand (``WrongHost``)."""

    def __init__(self, inner: ContainerRegistry) -> None:
        self._inner = inner
        self.moved: set[int] = set()

    def for_segment(self, segment_name: str) -> SegmentContainer:
        container = self._inner.for_segment(segment_name)
        if container.container_id in self.moved:
            raise ContainerNotOwnedError(container.container_id)
        return container

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


async def test_appends_with_container_moved_while_in_flight_ack_before_wrong_host(env: Env) -> None:
    service = env.service
    registry = MovingRegistry(service.registry)
    server = await asyncio.get_running_loop().create_server(
        lambda: ServerConnection(registry, service.requests, service.tracker, service.config.server),  # type: ignore[arg-type]
        "127.0.0.1",
        0,
    )
    try:
        env.peer = await WirePeer.connect(server.sockets[0].getsockname()[:2])
        await env.peer.request(SetupAppend(5, env.writer, SEGMENT, ""))
        await env.peer.request(SetupAppend(6, env.other, OTHER, ""))
        await send_held_blocks(env, 2)  # events 1..10
        registry.moved.add(service.registry.for_segment(SEGMENT).container_id)
        _, moved = block(env.writer, 11, 5, request_id=70)  # refused when taken: wrong host
        env.peer.send(moved)
        # the other writer has nothing in flight: its WrongHost comes at once, after the pump took ours
        _, other = block(env.other, 1, 1, request_id=71)
        env.peer.send(other)
        first = await env.peer.receive()
        assert first == WrongHost(71, OTHER, "", ""), f"reply before the acks of earlier appends: {first}"
        env.gate.release()
        replies = await replies_until(env.peer, lambda rs: any(isinstance(r, WrongHost) for r in rs))
        assert_acks_then(replies, WrongHost, 10)
        assert replies[-1] == WrongHost(70, SEGMENT, "", "")
        await env.peer.close()
    finally:
        server.close()
        await server.wait_closed()
