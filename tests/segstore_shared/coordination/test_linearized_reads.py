"""The coalesced linearized reads of the ZooKeeper store, made deterministic: a client whose replies the test holds.

A round sends one ``sync`` and the ``get`` of every path asked for before it started, then one ``multi`` of
version checks of what it read. The race that matters: a read asked for while a round is in flight must not be
answered by that round (its sync may predate a write the reader saw complete), so it waits for the next round,
whose sync follows it. A read whose check fails (the node changed after the get: a stale read, as a session on
the ZooKeeper leader can get after ``sync``) is never answered with that value: it goes to the next round.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import kazoo.exceptions as kz
import pytest

from segstore_shared.coordination.kazoo_store import _LinearizedReads
from segstore_shared.coordination.store import CoordinationUnavailableError, Versioned

pytestmark = pytest.mark.unit


@dataclass
class HeldReply:
    """A kazoo IAsyncResult whose outcome the test decides (``rawlink`` callbacks run when it is set)."""

    links: list[Any] = field(default_factory=list)
    value: Any = None
    exception: BaseException | None = None
    done: bool = False

    def rawlink(self, callback: Any) -> None:
        self.links.append(callback)
        if self.done:
            callback(self)

    def successful(self) -> bool:
        return self.exception is None

    def set(self, value: Any) -> None:
        self.value, self.done = value, True
        for callback in self.links:
            callback(self)


@dataclass
class Stat:
    version: int


class HeldTransaction:
    def __init__(self, client: HeldClient) -> None:
        self.client = client
        self.checks: list[tuple[str, int]] = []

    def check(self, path: str, version: int) -> None:
        self.checks.append((path, version))

    def commit_async(self) -> HeldReply:
        reply = HeldReply()
        self.client.sent.append(("multi", ",".join(f"{p}@{v}" for p, v in self.checks), reply))
        return reply


class HeldClient:
    """Records every request in order; replies wait until the test releases them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, HeldReply]] = []

    def transaction(self) -> HeldTransaction:
        return HeldTransaction(self)

    def sync_async(self, path: str) -> HeldReply:
        reply = HeldReply()
        self.sent.append(("sync", path, reply))
        return reply

    def get_async(self, path: str) -> HeldReply:
        reply = HeldReply()
        self.sent.append(("get", path, reply))
        return reply


async def settle() -> None:
    """Let the loop run what the released replies scheduled (call_soon_threadsafe, then the round's task)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_read_asked_during_a_round_waits_for_the_next_round() -> None:
    client = HeldClient()
    reads = _LinearizedReads(client)  # type: ignore[arg-type]
    first = asyncio.create_task(reads.read("/log"))
    await settle()
    assert [(kind, path) for kind, path, _ in client.sent] == [("sync", "/log"), ("get", "/log")]
    late = asyncio.create_task(reads.read("/log"))  # asked after round 1's sync was sent
    also = asyncio.create_task(reads.read("/other"))
    await settle()
    assert len(client.sent) == 2, "a read asked during a round joined it"
    client.sent[0][2].set(None)
    client.sent[1][2].set((b"epoch 1", Stat(1)))
    await settle()
    assert client.sent[2][:2] == ("multi", "/log@1")
    assert not first.done(), "answered before its version check committed"
    client.sent[2][2].set([True])
    await settle()
    assert await first == Versioned(b"epoch 1", 1)
    assert not late.done()
    round_two = client.sent[3:]
    assert [(kind, path) for kind, path, _ in round_two] == [("sync", "/log"), ("get", "/log"), ("get", "/other")]
    round_two[0][2].set(None)
    round_two[1][2].set((b"epoch 2", Stat(2)))
    round_two[2][2].set((b"x", Stat(0)))
    await settle()
    assert client.sent[-1][:2] == ("multi", "/log@2,/other@0")
    client.sent[-1][2].set([True, True])
    assert await late == Versioned(b"epoch 2", 2)  # served by a sync sent after it asked
    assert await also == Versioned(b"x", 0)


async def test_reads_asked_together_share_one_sync() -> None:
    client = HeldClient()
    reads = _LinearizedReads(client)  # type: ignore[arg-type]
    tasks = [asyncio.create_task(reads.read(f"/log-{i % 3}")) for i in range(9)]
    await settle()
    kinds = [kind for kind, _, _ in client.sent]
    assert kinds == ["sync", "get", "get", "get"]
    client.sent[0][2].set(None)
    for index, (_, path, reply) in enumerate(client.sent[1:]):
        reply.set((path.encode(), Stat(index)))
    await settle()
    assert [kind for kind, _, _ in client.sent] == ["sync", "get", "get", "get", "multi"]
    client.sent[-1][2].set([True, True, True])
    results = await asyncio.gather(*tasks)
    assert [r.data for r in results] == [f"/log-{i % 3}".encode() for i in range(9)]
    assert len(client.sent) == 5


async def test_a_read_whose_version_check_fails_is_read_again_in_the_next_round() -> None:
    client = HeldClient()
    reads = _LinearizedReads(client)  # type: ignore[arg-type]
    stale = asyncio.create_task(reads.read("/log"))
    fresh = asyncio.create_task(reads.read("/other"))
    await settle()
    client.sent[0][2].set(None)
    client.sent[1][2].set((b"epoch 1", Stat(1)))  # stale: epoch 2 was written and acknowledged already
    client.sent[2][2].set((b"y", Stat(3)))
    await settle()
    client.sent[3][2].set([kz.BadVersionError(), kz.RolledBackError()])
    await settle()
    assert not stale.done() and not fresh.done()
    assert [(kind, path) for kind, path, _ in client.sent[4:]] == [("sync", "/log"), ("get", "/log"), ("get", "/other")]
    client.sent[4][2].set(None)
    client.sent[5][2].set((b"epoch 2", Stat(2)))
    client.sent[6][2].set((b"y", Stat(3)))
    await settle()
    client.sent[7][2].set([True, True])
    assert await stale == Versioned(b"epoch 2", 2)
    assert await fresh == Versioned(b"y", 3)


async def test_an_absent_node_needs_no_check_and_a_failed_check_fails_the_reader() -> None:
    client = HeldClient()
    reads = _LinearizedReads(client)  # type: ignore[arg-type]
    absent = asyncio.create_task(reads.read("/gone"))
    await settle()
    client.sent[0][2].set(None)
    client.sent[1][2].exception = kz.NoNodeError()
    client.sent[1][2].set(None)
    assert await absent is None
    assert [kind for kind, _, _ in client.sent] == ["sync", "get"]
    lost = asyncio.create_task(reads.read("/log"))
    await settle()
    client.sent[2][2].set(None)
    client.sent[3][2].set((b"epoch 1", Stat(1)))
    await settle()
    client.sent[4][2].exception = kz.ConnectionLoss()
    client.sent[4][2].set(None)
    with pytest.raises(CoordinationUnavailableError):
        await lost
