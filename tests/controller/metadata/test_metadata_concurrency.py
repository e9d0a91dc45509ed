"""Two store instances (two controllers, two coordination sessions) writing the same stream: no
update is lost; a decision based on a stale read fails with a typed error instead of overwriting.

The in-memory coordination store applies every call at once, so its sessions are wrapped to yield
to the event loop around each call: the two instances' steps then interleave at every await."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.metadata import (
    CreateStreamStatus,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    StreamMetadataStore,
    StreamState,
    WriterMarkStatus,
)
from controller.metadata.errors import (
    GenerationMismatchError,
    IllegalTxnTransitionError,
    OperationConflictError,
    ScaleConflictError,
    WriteConflictError,
)
from controller_client.model import ScalingPolicy, StreamConfiguration, TxnState, segment_id
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SC, ST = "scope1", "stream1"
S0, S1 = segment_id(0, 0), segment_id(1, 0)


class Interleaving:
    """A session that yields to the loop (a random number of times) before and after each call."""

    def __init__(self, inner: CoordinationStore, rng: random.Random) -> None:
        self._inner = inner
        self._rng = rng

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            for _ in range(self._rng.randint(0, 3)):
                await asyncio.sleep(0)
            result = await target(*args, **kwargs)
            await asyncio.sleep(0)
            return result

        return call


@pytest.fixture(params=["memory", "zookeeper"])
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[tuple[StreamMetadataStore, StreamMetadataStore]]:
    sessions: list[CoordinationStore] = []
    if request.param == "memory":
        server = MemoryCoordinationServer()
        rng = random.Random(7)
        sessions = [server.connect(), server.connect()]
        stores = [StreamMetadataStore(Interleaving(s, rng)) for s in sessions]  # type: ignore[arg-type]
    else:
        hosts: str = request.getfixturevalue("zk_chroot")
        sessions = [await KazooCoordinationStore.connect(hosts), await KazooCoordinationStore.connect(hosts)]
        stores = [StreamMetadataStore(s) for s in sessions]
    await stores[0].create_scope(SC)
    yield stores[0], stores[1]
    for session in sessions:
        await session.close()


async def active(store: StreamMetadataStore, segments: int = 2) -> None:
    await store.create_stream(SC, ST, StreamConfiguration(ScalingPolicy.fixed(segments)), 1000)
    await store.set_state(SC, ST, StreamState.ACTIVE)


async def outcomes(*calls: Any) -> list[Any]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_concurrent_create_stream_with_same_name(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    config = StreamConfiguration(ScalingPolicy.fixed(3))
    ra, rb = await asyncio.gather(a.create_stream(SC, ST, config, 1000), b.create_stream(SC, ST, config, 2000))
    statuses = sorted([ra.status.value, rb.status.value])
    assert statuses == [CreateStreamStatus.EXISTS_CREATING.value, CreateStreamStatus.NEW.value]
    assert ra.creation_time_ms == rb.creation_time_ms
    assert len((await b.get_epoch(SC, ST, 0)).segments) == 3


async def test_concurrent_sealed_sizes_never_lost(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    await active(a)
    sizes = {segment_id(i, i % 3): 100 + i for i in range(40)}
    await asyncio.gather(
        *(
            (a if i % 2 else b).record_sealed_sizes(SC, ST, {segment: size})
            for i, (segment, size) in enumerate(sizes.items())
        )
    )
    assert await a.get_sealed_sizes(SC, ST, list(sizes)) == sizes


async def test_concurrent_state_changes_with_expected_version(
    pair: tuple[StreamMetadataStore, StreamMetadataStore],
) -> None:
    a, b = pair
    await active(a)
    _, version = await a.get_state_versioned(SC, ST)
    results = await outcomes(
        a.set_state(SC, ST, StreamState.SCALING, expected_version=version),
        b.set_state(SC, ST, StreamState.TRUNCATING, expected_version=version),
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    assert len(winners) == 1
    assert isinstance(results[1 - winners[0]], WriteConflictError)
    expected = StreamState.SCALING if winners == [0] else StreamState.TRUNCATING
    assert await b.get_state(SC, ST) == expected


async def test_concurrent_scale_submissions(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    await active(a)
    same = await outcomes(
        a.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 2000), b.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 2000)
    )
    assert same[0] == same[1]
    await a.reset_epoch_transition(SC, ST)
    different = await outcomes(
        a.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 2000), b.submit_scale(SC, ST, [S0], [(0.0, 0.5)], 2000)
    )
    won = [r for r in different if not isinstance(r, Exception)]
    lost = [r for r in different if isinstance(r, Exception)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], ScaleConflictError)
    assert await a.get_epoch_transition(SC, ST) == won[0]


async def test_concurrent_txns_get_unique_commit_order(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    await active(a)
    txns = [uuid.uuid4() for _ in range(16)]
    await asyncio.gather(*((a if i % 2 else b).create_txn(SC, ST, t, 60_000) for i, t in enumerate(txns)))
    await asyncio.gather(*((b if i % 2 else a).seal_txn(SC, ST, t, True) for i, t in enumerate(txns)))
    active_txns = await a.list_active_txns(SC, ST)
    assert {t.txn_id for t in active_txns} == set(txns)
    assert all(t.record.status == TxnState.COMMITTING for t in active_txns)
    orders = [t.record.commit_order for t in active_txns]
    assert len(set(orders)) == len(txns) and min(orders) >= 1


async def test_concurrent_ping_and_abort_keep_both_effects(
    pair: tuple[StreamMetadataStore, StreamMetadataStore],
) -> None:
    a, b = pair
    await active(a)
    for _ in range(5):
        txn = uuid.uuid4()
        await a.create_txn(SC, ST, txn, 1000)
        ping, seal = await outcomes(a.ping_txn(SC, ST, txn, 500_000), b.seal_txn(SC, ST, txn, False))
        assert seal == (TxnState.ABORTING, 0)
        record = (await b.get_txn(SC, ST, txn)).record
        assert record.status == TxnState.ABORTING
        if isinstance(ping, int):  # the ping landed first: the abort kept its lease
            assert record.lease_expiry_ms == ping
        else:
            assert isinstance(ping, IllegalTxnTransitionError)


async def test_concurrent_writer_marks_never_lost(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    await active(a)
    results = await asyncio.gather(
        *((a if i % 2 else b).note_writer_mark(SC, ST, f"w{i}", i, {S0: i}) for i in range(20)),
        *(a.note_writer_mark(SC, ST, "shared", t, {S0: t}) for t in range(0, 20, 2)),
        *(b.note_writer_mark(SC, ST, "shared", t, {S0: t}) for t in range(1, 20, 2)),
    )
    assert results[:20] == [WriterMarkStatus.SUCCESS] * 20
    marks = await b.list_writer_marks(SC, ST)
    assert {f"w{i}" for i in range(20)} <= set(marks)
    accepted = [
        t
        for t, r in zip([*range(0, 20, 2), *range(1, 20, 2)], results[20:], strict=True)
        if r == WriterMarkStatus.SUCCESS
    ]
    assert marks["shared"].timestamp == max(accepted)


async def test_concurrent_configuration_updates(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    await active(a)
    one = StreamConfiguration(ScalingPolicy.fixed(2), tags=("one",))
    two = StreamConfiguration(ScalingPolicy.fixed(3), tags=("two",))
    results = await outcomes(a.start_update_configuration(SC, ST, one), b.start_update_configuration(SC, ST, two))
    won = [r for r in results if not isinstance(r, Exception)]
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(won) == 1 and isinstance(lost[0], (WriteConflictError, OperationConflictError))
    assert await a.get_configuration(SC, ST) == won[0][0].config


async def test_concurrent_reader_group_updates(pair: tuple[StreamMetadataStore, StreamMetadataStore]) -> None:
    a, b = pair
    await active(a)
    base = ReaderGroupConfigRecord(
        retention_type=ReaderGroupRetentionType.AUTOMATIC, starting_stream_cuts={f"{SC}/{ST}": "unbounded"}
    )
    await a.create_reader_group(SC, "rg", base)
    other = ReaderGroupConfigRecord(group_refresh_time_ms=1, starting_stream_cuts={f"{SC}/{ST}": "unbounded"})
    results = await outcomes(a.update_reader_group(SC, "rg", other, 0), b.update_reader_group(SC, "rg", base, 0))
    won = [r for r in results if not isinstance(r, Exception)]
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(won) == 1
    assert isinstance(lost[0], (WriteConflictError, GenerationMismatchError, OperationConflictError))
    final = await b.get_reader_group(SC, "rg")
    assert final.generation == 1 and final.same_config(won[0]) and not final.updating
    expected = [f"{SC}/rg"] if final.is_subscriber else []
    assert await a.list_subscribers(SC, ST) == expected
    await asyncio.gather(
        a.create_reader_group(SC, "x", base), b.create_reader_group(SC, "y", base), a.create_reader_group(SC, "z", base)
    )
    assert set(await b.list_subscribers(SC, ST)) >= {f"{SC}/x", f"{SC}/y", f"{SC}/z"}
