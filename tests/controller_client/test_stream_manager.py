"""StreamManager: scopes, streams, policies, cuts and truncation; the controller-backed endpoint resolver."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import uuid
from pathlib import Path

import pytest
from fake_controller import FakeController

from controller_client.errors import ScopeNotEmptyError, ScopeNotFoundError, StreamNotSealedError
from controller_client.model import (
    InvalidModelError,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    qualified_segment_name,
    segment_id,
    transaction_segment_name,
)
from controller_client.stream_manager import ControllerResolver, StreamManager
from segment_store.client import SegmentIsSealedError, SegmentStatus

pytestmark = pytest.mark.integration

SCOPE = "mgr"


async def test_scopes_and_streams_lifecycle(manager: StreamManager) -> None:
    assert await manager.create_scope(SCOPE)
    assert not await manager.create_scope(SCOPE)
    assert await manager.scope_exists(SCOPE)
    assert await manager.list_scopes() == [SCOPE]
    with pytest.raises(InvalidModelError):
        await manager.create_scope("bad/name")
    with pytest.raises(ScopeNotFoundError):
        await manager.create_stream("nope", "s")

    tagged = StreamConfiguration(ScalingPolicy.fixed(3), tags=("blue",))
    assert await manager.create_stream(SCOPE, "a", tagged)
    assert not await manager.create_stream(SCOPE, "a", tagged)
    assert await manager.create_stream(SCOPE, "b")
    assert await manager.stream_exists(SCOPE, "a")
    assert not await manager.stream_exists(SCOPE, "c")
    assert await manager.list_streams(SCOPE) == ["a", "b"]
    assert await manager.list_streams(SCOPE, "blue") == ["a"]
    assert len(await manager.current_segments(SCOPE, "a")) == 3

    await manager.update_retention_policy(SCOPE, "a", RetentionPolicy.by_size_bytes(1000))
    await manager.update_scaling_policy(SCOPE, "a", ScalingPolicy.by_event_rate(100, 2, 3))
    config = await manager.get_stream_configuration(SCOPE, "a")
    assert config.retention == RetentionPolicy.by_size_bytes(1000)
    assert config.scaling == ScalingPolicy.by_event_rate(100, 2, 3)
    assert config.tags == ("blue",)

    with pytest.raises(ScopeNotEmptyError):
        await manager.delete_scope(SCOPE)
    with pytest.raises(StreamNotSealedError):
        await manager.delete_stream(SCOPE, "a")
    for stream in ("a", "b"):
        await manager.seal_stream(SCOPE, stream)
        await manager.delete_stream(SCOPE, stream)
    await manager.delete_scope(SCOPE)
    assert not await manager.scope_exists(SCOPE)


async def test_head_and_tail_cuts_and_truncation(manager: StreamManager) -> None:
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, "cuts", StreamConfiguration(ScalingPolicy.fixed(2)))
    segments = [s.segment_id for s in await manager.current_segments(SCOPE, "cuts")]
    assert await manager.head_cut(SCOPE, "cuts") == StreamCut(SCOPE, "cuts", dict.fromkeys(segments, 0))
    async with await manager.create_writer(SCOPE, "cuts") as writer:
        for i in range(100):
            await writer.write_event(b"event %03d" % i, f"k{i}")
    tail = await manager.tail_cut(SCOPE, "cuts")
    assert set(tail.positions) == set(segments)
    assert sum(tail.positions.values()) == 100 * (8 + 9)
    await manager.truncate(tail)
    assert await manager.head_cut(SCOPE, "cuts") == tail
    for sid in segments:
        info = await manager.segment_info(SCOPE, "cuts", sid)
        assert info.start_offset == tail.positions[sid]
    await manager.seal_stream(SCOPE, "cuts")
    assert await manager.current_segments(SCOPE, "cuts") == []
    assert await manager.tail_cut(SCOPE, "cuts") == tail  # sealed: the last segments at their ends


async def test_a_tail_cut_taken_in_the_middle_of_a_scale_is_of_its_new_epoch(
    manager: StreamManager, controller: FakeController
) -> None:
    """A scale seals its segments before the controller makes their successors current; writers follow the seal
    into the successors at once, so a cut of the sealed segments would leave their acknowledged events out (the
    self-test saw 15 events acknowledged before a tail cut and missing from it). A cut asked then waits for the
    new epoch."""
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, "midscale", StreamConfiguration(ScalingPolicy.fixed(1)))
    [old] = await manager.current_segments(SCOPE, "midscale")
    async with await manager.create_writer(SCOPE, "midscale") as writer:
        for i in range(10):
            await writer.write_event(b"before %d" % i, f"k{i}")
    await manager.client.seal_segment(qualified_segment_name(SCOPE, "midscale", old.segment_id))  # the seal only
    saw_sealed = asyncio.Event()
    segment_info = manager.segment_info

    async def watched(scope: str, stream: str, sid: int) -> SegmentStatus:
        info = await segment_info(scope, stream, sid)
        if info.sealed:
            saw_sealed.set()
        return info

    manager.segment_info = watched  # type: ignore[method-assign]
    cut = asyncio.create_task(manager.tail_cut(SCOPE, "midscale"))
    await saw_sealed.wait()  # it found the current segment sealed (and, on the old rule, returned that cut)
    seal = controller.client.seal_segment

    async def seal_again(name: str) -> None:  # the fake's scale seals too: sealed already, as a retried seal finds it
        with contextlib.suppress(SegmentIsSealedError):
            await seal(name)

    controller.client.seal_segment = seal_again  # type: ignore[method-assign]
    successors = await controller.scale(SCOPE, "midscale", [old.segment_id], [(0.0, 0.5), (0.5, 1.0)])
    assert set((await cut).positions) == {s.segment_id for s in successors}


async def test_manager_resolves_endpoints_through_the_controller_once_per_segment(
    manager: StreamManager, controller: FakeController
) -> None:
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, "uri", StreamConfiguration(ScalingPolicy.fixed(2)))
    async with await manager.create_writer(SCOPE, "uri") as writer:
        for i in range(200):
            await writer.write_event(b"e", f"k{i}")
    await manager.tail_cut(SCOPE, "uri")
    await manager.tail_cut(SCOPE, "uri")
    assert controller.uri_lookups == 2  # two segments; everything else came from the cache


class _UriStub:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.endpoint = ("127.0.0.1", 1)

    async def get_uri(self, scope: str, stream: str, sid: int) -> tuple[str, int]:
        self.calls.append((scope, stream, sid))
        return self.endpoint


async def test_resolver_with_ttl_invalidation_and_dead_connections() -> None:
    stub = _UriStub()
    now = [0.0]
    alive = {("127.0.0.1", 1): False}
    resolver = ControllerResolver(
        stub,  # type: ignore[arg-type]
        ttl_ms=1_000,
        is_alive=lambda endpoint: alive.get(endpoint, False),
        clock=lambda: now[0],
    )
    parent = qualified_segment_name("s", "t", segment_id(3, 2))
    txn = transaction_segment_name(parent, uuid.uuid4())
    assert await resolver(parent) == ("127.0.0.1", 1)
    assert await resolver(txn) == ("127.0.0.1", 1)  # a transaction segment resolves as its parent
    assert stub.calls == [("s", "t", segment_id(3, 2))]
    alive[("127.0.0.1", 1)] = True
    await resolver(parent)  # connected now
    alive[("127.0.0.1", 1)] = False  # ... and the connection died: ask again
    stub.endpoint = ("127.0.0.1", 2)
    assert await resolver(parent) == ("127.0.0.1", 2)
    assert len(stub.calls) == 2
    resolver.invalidate(txn)
    await resolver(parent)
    assert len(stub.calls) == 3
    now[0] = 2.0  # past the TTL
    await resolver(parent)
    assert len(stub.calls) == 4
    resolver.invalidate_endpoint(("127.0.0.1", 2))
    await resolver(parent)
    assert len(stub.calls) == 5
    with pytest.raises(InvalidModelError):
        await resolver("_system/table")


def test_package_exports_and_controller_client_fit_the_port() -> None:
    from controller_client import stream_manager
    from controller_client.controller.api import ControllerClient
    from controller_client.ports import ControllerApi

    # Loaded by path: with tests/ on sys.path, tests/controller_client/ shadows the package's __init__.
    spec = importlib.util.spec_from_file_location("_cc_init", Path(stream_manager.__file__).with_name("__init__.py"))
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)
    assert len(package.__all__) > 30
    for name in package.__all__:
        assert getattr(package, name) is not None
    # The gRPC client has every method of the port, with the port's parameters first and in order.
    for name, member in vars(ControllerApi).items():
        if name.startswith("_") or not callable(member):
            continue
        wanted = list(inspect.signature(member).parameters)
        actual = list(inspect.signature(getattr(ControllerClient, name)).parameters)
        assert actual[: len(wanted)] == wanted, name
