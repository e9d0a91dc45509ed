"""The metadata store over a ZooKeeper member that has not caught up with the leader: reads it answers are as of
an earlier moment until a ``sync``. A successor look-up must not answer "none" from such a view: a reader asks only
once the segment store said the segment is sealed, after the scale wrote its new epoch, and an empty answer makes
it take the sealed segment for the end of its key range (``segstore selftest`` lost the events of a merge so)."""

from __future__ import annotations

from typing import Any

from metadata_contract_env import S1, SC, ST, active_stream, do_scale

from controller.metadata import StreamMetadataStore
from controller_client.model import segment_id
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore
from segstore_shared.coordination.store import NodeNotFoundError, Versioned


class BehindMember:
    """A session on a member that is behind: until :meth:`sync`, ``get`` answers the ``frozen`` values and
    ``exists``/``get`` of the ``unseen`` paths say absent; everything else is the real session's."""

    def __init__(self, store: MemoryCoordinationStore) -> None:
        self._store = store
        self.frozen: dict[str, Versioned] = {}
        self.unseen: set[str] = set()
        self.syncs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get(self, path: str) -> Versioned:
        if path in self.unseen:
            raise NodeNotFoundError("not on this member yet", path)
        return self.frozen.get(path) or await self._store.get(path)

    async def exists(self, path: str) -> bool:
        return path not in self.unseen and await self._store.exists(path)

    async def sync(self, path: str) -> None:
        self.syncs += 1
        self.frozen.clear()
        self.unseen.clear()
        await self._store.sync(path)


async def test_successors_of_a_segment_sealed_by_a_scale_the_member_has_not_seen_yet() -> None:
    member = BehindMember(MemoryCoordinationServer().connect())
    store = StreamMetadataStore(member)  # the coordination port, duck-typed
    await active_stream(store)
    current = store._sp(SC, ST, "current")
    before = await member.get(current)
    await do_scale(store, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
    member.frozen[current] = before  # the member answers as before the scale
    member.unseen.add(store._sp(SC, ST, "epochs", 1))
    successors = await store.get_successors(SC, ST, S1)
    assert {r.segment_id: p for r, p in successors.items()} == {segment_id(2, 1): [S1], segment_id(3, 1): [S1]}
    assert member.syncs == 1


async def test_a_segment_of_the_latest_epoch_has_no_successors_after_a_sync() -> None:
    member = BehindMember(MemoryCoordinationServer().connect())
    store = StreamMetadataStore(member)
    await active_stream(store)
    assert await store.get_successors(SC, ST, S1) == {}
    assert member.syncs == 1
