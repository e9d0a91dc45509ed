"""Every multi-step change survives a controller crash at any write.

A wrapper around the real coordination session (memory or ZooKeeper) lets the n-th mutating call
crash the "controller" - before the write is applied, or after it (the outcome a connection loss
leaves unknown) - and every later call of that dead instance fail. A *fresh* store instance over
the same coordination store then resumes the workflow from what is stored, the way a restarted
workflow does, and the final tree must equal the tree of a run without a crash. This is repeated
for n = 0, 1, ... until the workflow runs to completion, so it stops after each step.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from controller.metadata import (
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    StreamMetadataStore,
    StreamState,
)
from controller.metadata.errors import ReaderGroupNotFoundError, ScopeNotFoundError, StreamNotFoundError
from controller_client.model import ScalingPolicy, StreamConfiguration, TxnState, segment_id
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore, NodeNotFoundError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SC, ST = "scope1", "stream1"
S0, S1 = segment_id(0, 0), segment_id(1, 0)
S2, S3 = segment_id(2, 1), segment_id(3, 1)
TXN = uuid.UUID(int=42)
Step = Callable[[StreamMetadataStore], Awaitable[None]]


class SimulatedCrash(Exception):
    """The controller process died."""


class CrashingCoordination:
    """Delegates to a real session; the ``crash_at``-th mutating call (0-based) crashes, before or
    after being applied, and every call after that fails (the process is gone)."""

    MUTATING = frozenset({"create", "compare_and_set", "delete"})

    def __init__(self, inner: CoordinationStore, crash_at: int, after: bool) -> None:
        self._inner = inner
        self._left = crash_at
        self._after = after
        self.crashed = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.crashed:
                raise SimulatedCrash("dead controller")
            if name in self.MUTATING:
                if self._left == 0:
                    self.crashed = True
                    if self._after:
                        await target(*args, **kwargs)
                    raise SimulatedCrash(f"crash at {name}{args[:1]}")
                self._left -= 1
            return await target(*args, **kwargs)

        return call


class Clock:
    now = 5_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=["memory", "zookeeper"])
async def session(request: pytest.FixtureRequest) -> AsyncIterator[CoordinationStore]:
    if request.param == "memory":
        coordination: CoordinationStore = MemoryCoordinationServer().connect()
    else:
        coordination = await KazooCoordinationStore.connect(request.getfixturevalue("zk_chroot"))
    yield coordination
    await coordination.close()


async def dump(coordination: CoordinationStore, root: str) -> dict[str, Any]:
    """Every node below ``root`` (paths relative to it) with its decoded data, minus random ids and
    commit order numbers."""
    result: dict[str, Any] = {}

    async def walk(path: str) -> None:
        try:
            node = await coordination.get(path)
        except NodeNotFoundError:
            return
        data: Any = node.data
        with contextlib.suppress(ValueError):
            data = json.loads(node.data) if node.data else None
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("uid", "id", "o")}
        result[path[len(root) :]] = data
        for child in await coordination.children(path):
            await walk(f"{path}/{child}")

    await walk(root)
    return result


async def crash_everywhere(session: CoordinationStore, setup: Step, workflow: Step, resume: Step) -> int:
    """Run ``workflow`` crashing at each write in turn, resume with a fresh store, compare trees.
    Returns how many crash points were exercised."""
    clock = Clock()
    reference_root = f"/ref{uuid.uuid4().hex[:8]}"
    reference = StreamMetadataStore(session, reference_root, clock_ms=clock)
    await setup(reference)
    await workflow(reference)
    expected = await dump(session, reference_root)
    points = 0
    for after in (False, True):
        for n in range(1000):
            root = f"/run{uuid.uuid4().hex[:8]}"
            await setup(StreamMetadataStore(session, root, clock_ms=clock))
            victim = CrashingCoordination(session, n, after)
            try:
                await workflow(StreamMetadataStore(victim, root, clock_ms=clock))  # type: ignore[arg-type]
            except SimulatedCrash:
                points += 1
                await resume(StreamMetadataStore(session, root, clock_ms=clock))
                assert await dump(session, root) == expected, f"crash at write {n} (after={after})"
                continue
            assert not victim.crashed
            assert await dump(session, root) == expected
            break
    return points


def cfg(segments: int, tags: tuple[str, ...] = ()) -> StreamConfiguration:
    return StreamConfiguration(ScalingPolicy.fixed(segments), tags=tags)


async def active_stream(s: StreamMetadataStore) -> None:
    await s.create_scope(SC)
    await s.create_stream(SC, ST, cfg(2, ("t",)), 1000)
    await s.set_state(SC, ST, StreamState.ACTIVE)


async def scale_workflow(s: StreamMetadataStore) -> None:
    await s.submit_scale(SC, ST, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
    await s.set_state(SC, ST, StreamState.SCALING)
    await s.start_scale(SC, ST, manual=True)
    await s.scale_create_new_epoch(SC, ST)
    await s.scale_complete(SC, ST, {S1: 10})
    await s.set_state(SC, ST, StreamState.ACTIVE)


async def resume_scale(s: StreamMetadataStore) -> None:
    transition, _ = await s.get_epoch_transition(SC, ST)
    if transition.is_empty and (await s.get_active_epoch(SC, ST)).epoch == 0:
        await s.submit_scale(SC, ST, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
        transition, _ = await s.get_epoch_transition(SC, ST)
    if not transition.is_empty:
        await s.set_state(SC, ST, StreamState.SCALING)
        await s.start_scale(SC, ST, manual=True)
        await s.scale_create_new_epoch(SC, ST)
        await s.scale_complete(SC, ST, {S1: 10})
    await s.set_state(SC, ST, StreamState.ACTIVE)


async def test_resume_create_stream(session: CoordinationStore) -> None:
    async def setup(s: StreamMetadataStore) -> None:
        await s.create_scope(SC)

    async def create(s: StreamMetadataStore) -> None:
        result = await s.create_stream(SC, ST, cfg(3, ("a", "b")), 1000)
        assert result.creation_time_ms == 1000

    assert await crash_everywhere(session, setup, create, create) > 15


async def test_resume_scale(session: CoordinationStore) -> None:
    assert await crash_everywhere(session, active_stream, scale_workflow, resume_scale) > 8


async def test_resume_truncation(session: CoordinationStore) -> None:
    cut = {S0: 10, S2: 5, S3: 7}

    async def setup(s: StreamMetadataStore) -> None:
        await active_stream(s)
        await scale_workflow(s)

    async def truncate(s: StreamMetadataStore) -> None:
        await s.set_state(SC, ST, StreamState.TRUNCATING)
        await s.start_truncation(SC, ST, cut)
        await s.complete_truncation(SC, ST)
        await s.set_state(SC, ST, StreamState.ACTIVE)

    async def resume(s: StreamMetadataStore) -> None:
        record, _ = await s.get_truncation_record(SC, ST)
        if not record.updating and dict(record.stream_cut) != cut:
            await s.set_state(SC, ST, StreamState.TRUNCATING)
            await s.start_truncation(SC, ST, cut)
        await s.complete_truncation(SC, ST)
        await s.set_state(SC, ST, StreamState.ACTIVE)

    assert await crash_everywhere(session, setup, truncate, resume) >= 4


async def test_resume_update_configuration(session: CoordinationStore) -> None:
    new = cfg(2, ("b", "c"))

    async def update(s: StreamMetadataStore) -> None:
        await s.set_state(SC, ST, StreamState.UPDATING)
        await s.start_update_configuration(SC, ST, new)
        await s.complete_update_configuration(SC, ST)
        await s.set_state(SC, ST, StreamState.ACTIVE)

    async def resume(s: StreamMetadataStore) -> None:
        record, _ = await s.get_configuration_record(SC, ST)
        if not record.updating and record.config != new:
            await s.set_state(SC, ST, StreamState.UPDATING)
            await s.start_update_configuration(SC, ST, new)
        await s.complete_update_configuration(SC, ST)
        await s.set_state(SC, ST, StreamState.ACTIVE)

    assert await crash_everywhere(session, active_stream, update, resume) >= 6


async def test_resume_commit_with_rolling_txn(session: CoordinationStore) -> None:
    async def setup(s: StreamMetadataStore) -> None:
        await active_stream(s)
        await s.create_txn(SC, ST, TXN, 60_000)
        await scale_workflow(s)
        await s.seal_txn(SC, ST, TXN, True)

    async def commit(s: StreamMetadataStore) -> None:
        await s.set_state(SC, ST, StreamState.COMMITTING_TXN)
        record, _ = await s.start_committing_transactions(SC, ST)
        assert record.epoch == 0
        await s.start_rolling_txn(SC, ST, 1)
        await s.rolling_txn_create_duplicate_epochs(SC, ST, {segment_id(0, 2): 3, segment_id(1, 2): 4}, 2500)
        await s.complete_rolling_txn(SC, ST, {S0: 1, S2: 2, S3: 3})
        await s.complete_commit_batch(SC, ST)
        await s.set_state(SC, ST, StreamState.ACTIVE)

    async def resume(s: StreamMetadataStore) -> None:
        await s.set_state(SC, ST, StreamState.COMMITTING_TXN)
        record, _ = await s.start_committing_transactions(SC, ST)
        if not record.is_empty:
            active = await s.get_active_epoch(SC, ST)
            txn_epoch = await s.get_epoch(SC, ST, record.epoch)
            if record.is_rolling or txn_epoch.reference_epoch != active.reference_epoch:
                await s.start_rolling_txn(SC, ST, active.epoch)
                await s.rolling_txn_create_duplicate_epochs(SC, ST, {segment_id(0, 2): 3, segment_id(1, 2): 4}, 2500)
                await s.complete_rolling_txn(SC, ST, {S0: 1, S2: 2, S3: 3})
            await s.complete_commit_batch(SC, ST)
        await s.set_state(SC, ST, StreamState.ACTIVE)
        assert await s.get_txn_status(SC, ST, TXN) == TxnState.COMMITTED
        assert (await s.get_active_epoch(SC, ST)).epoch == 3

    assert await crash_everywhere(session, setup, commit, resume) >= 9


async def test_resume_txn_completion(session: CoordinationStore) -> None:
    async def setup(s: StreamMetadataStore) -> None:
        await active_stream(s)
        await s.create_txn(SC, ST, TXN, 60_000)
        await s.seal_txn(SC, ST, TXN, False)

    async def complete(s: StreamMetadataStore) -> None:
        await s.complete_aborted_txn(SC, ST, TXN)

    assert await crash_everywhere(session, setup, complete, complete) == 4


async def test_resume_delete_stream(session: CoordinationStore) -> None:
    async def setup(s: StreamMetadataStore) -> None:
        await active_stream(s)
        await s.create_txn(SC, ST, TXN, 60_000)
        await scale_workflow(s)
        await s.add_stream_cut_reference(SC, ST, {S0: 1, S1: 1}, 100, 2)
        await s.note_writer_mark(SC, ST, "w", 1, {S0: 1})
        await s.set_state(SC, ST, StreamState.SEALED)

    async def delete(s: StreamMetadataStore) -> None:
        await s.delete_stream(SC, ST)
        await s.delete_scope(SC)

    async def resume(s: StreamMetadataStore) -> None:
        with contextlib.suppress(StreamNotFoundError):
            await s.delete_stream(SC, ST)
        with contextlib.suppress(ScopeNotFoundError):  # the crash came after the scope was gone
            await s.delete_scope(SC)

    assert await crash_everywhere(session, setup, delete, resume) > 20


async def test_resume_reader_group_changes(session: CoordinationStore) -> None:
    both = ReaderGroupConfigRecord(
        retention_type=ReaderGroupRetentionType.AUTOMATIC,
        starting_stream_cuts={f"{SC}/{ST}": "unbounded", f"{SC}/other": "unbounded"},
    )
    one = ReaderGroupConfigRecord(
        retention_type=ReaderGroupRetentionType.AUTOMATIC, starting_stream_cuts={f"{SC}/other": "unbounded"}
    )

    async def setup(s: StreamMetadataStore) -> None:
        await active_stream(s)
        await s.create_stream(SC, "other", cfg(1), 1)

    async def lifecycle(s: StreamMetadataStore) -> None:
        await s.create_reader_group(SC, "rg", both)
        await s.update_reader_group(SC, "rg", one, 0)
        await s.create_reader_group(SC, "gone", both)
        await s.delete_reader_group(SC, "gone")

    async def resume(s: StreamMetadataStore) -> None:
        try:
            record = await s.get_reader_group(SC, "rg")
        except ReaderGroupNotFoundError:
            record = await s.create_reader_group(SC, "rg", both)
        if record.generation == 0 and not record.updating:
            record = await s.create_reader_group(SC, "rg", both)  # finish its subscriptions
            await s.update_reader_group(SC, "rg", one, 0)
        await s.complete_reader_group_update(SC, "rg")
        try:
            await s.create_reader_group(SC, "gone", both)
            await s.delete_reader_group(SC, "gone")
        except ReaderGroupNotFoundError:
            pass
        assert await s.list_subscribers(SC, ST) == []
        assert await s.list_subscribers(SC, "other") == [f"{SC}/rg"]

    assert await crash_everywhere(session, setup, lifecycle, resume) > 8
