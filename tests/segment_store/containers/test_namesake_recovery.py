"""Recovery of a container whose log still holds a deleted or merged segment and a newer namesake (issue 36).

A transaction segment is aborted (deleted) or committed (merged) and then created again under the same
name (a controller's create retried after the abort, as in the self-test run of seed 1127529609); the new
segment's bytes reach Tier-2 under that name. While Tier-1 still holds the old segment's operations, a
restart replays both: Tier-2's segment of that name is the *newer* one's (a name is created again only once
the old segment has left Tier-2), so neither the recovery nor the storage writer may judge or touch it for
the old one. Before the fix the container refused to start, for ever:
``StorageWriterCorruptedError('...: Tier-2 holds 1436 bytes, the log only 0')``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from container_env import ContainerEnv

from segment_store.containers.segment_container import ContainerState, SegmentContainer
from segstore_shared.contracts import SegmentNotExistsError, SegmentType

pytestmark = pytest.mark.unit

PARENT = "selftest/txns/0.#epoch.3"
TXN = "selftest/txns/0.#epoch.0#transaction.03a30a9e32792597324f7344d96d8247"


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    e = ContainerEnv()
    yield e
    await e.close()


async def read_all(container: SegmentContainer, name: str) -> bytes:
    info = await container.get_info(name)
    out = bytearray()
    position = info.start_offset
    while position < info.length:
        result = await container.read(name, position, info.length - position)
        out += result.data
        position += len(result.data)
    return bytes(out)


async def restart(env: ContainerEnv, old: SegmentContainer) -> SegmentContainer:
    """Stop ``old`` and start the container again over the same Tier-1 and Tier-2 (Tier-1 not truncated)."""
    assert env.tier1._logs[0].truncation is None, "the old segment's operations must still be in Tier-1"
    await old.stop()
    return await env.start()


async def test_restart_with_aborted_txn_segment_and_recreated_namesake_recovers(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment(TXN)
    await c.delete_segment(TXN)  # the abort: the segment never had a byte
    await c.flush_to_storage()
    await c.create_segment(TXN)  # the controller's create, retried after the abort
    data = b"e" * 1436
    await c.append(TXN, data)
    await c.flush_to_storage()
    assert (await c.storage.info(TXN)).length == 1436

    c2 = await restart(env, c)

    assert c2.state is ContainerState.RUNNING
    assert await read_all(c2, TXN) == data
    await c2.flush_to_storage()
    assert await c2.storage.read(TXN, 0, 1436) == data
    assert not any(s.name == TXN and not s.live for s in c2.metadata.segments()), "the deleted one is forgotten"


async def test_restart_with_merged_txn_segment_and_longer_namesake_recovers(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment(PARENT)
    await c.create_segment(TXN, SegmentType.STREAM)
    await c.append(TXN, b"committed")
    await c.merge(PARENT, TXN)
    await c.flush_to_storage()
    await c.create_segment(TXN)
    await c.append(TXN, b"a longer namesake")
    await c.flush_to_storage()

    c2 = await restart(env, c)

    assert await read_all(c2, PARENT) == b"committed"
    assert await read_all(c2, TXN) == b"a longer namesake"
    await c2.flush_to_storage()
    assert await c2.storage.read(PARENT, 0, 9) == b"committed"
    assert (await c2.storage.info(TXN)).length == 17
    assert await c2.storage.read(TXN, 0, 17) == b"a longer namesake"


async def test_restart_with_merged_txn_segment_and_shorter_namesake_keeps_both_intact(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment(PARENT)
    await c.create_segment(TXN, SegmentType.STREAM)
    await c.append(TXN, b"committed bytes")
    await c.merge(PARENT, TXN)
    await c.flush_to_storage()
    await c.create_segment(TXN)
    await c.append(TXN, b"new")
    await c.flush_to_storage()

    c2 = await restart(env, c)
    await c2.flush_to_storage()  # the replayed merge comes up again: its source's bytes must not land in `TXN`

    assert c2.state is ContainerState.RUNNING
    assert await c2.storage.read(PARENT, 0, 15) == b"committed bytes"
    assert (await c2.storage.info(PARENT)).length == 15
    info = await c2.storage.info(TXN)
    assert (info.length, info.sealed) == (3, False)
    assert await c2.storage.read(TXN, 0, 3) == b"new"
    await c2.append(TXN, b"+more")
    await c2.flush_to_storage()
    assert await c2.storage.read(TXN, 0, 8) == b"new+more"


async def test_restart_with_deleted_segment_and_deleted_namesake_forgets_both(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment(TXN)
    await c.append(TXN, b"aborted")
    await c.flush_to_storage()
    await c.delete_segment(TXN)
    await c.flush_to_storage()
    await c.create_segment(TXN)
    await c.append(TXN, b"aborted again, longer")
    await c.flush_to_storage()
    await c.delete_segment(TXN)

    c2 = await restart(env, c)
    await c2.flush_to_storage()

    with pytest.raises(SegmentNotExistsError):
        await c2.get_info(TXN)
    assert not await c2.storage.exists(TXN)
    assert not any(s.name == TXN for s in c2.metadata.segments())
