"""ControllerClient against a scripted in-test gRPC controller (``scripted_controller``): gRPC status codes,
retries with backoff, deadlines, connecting, closing and cancelling."""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio
import pytest
from scripted_controller import FAST, ScriptedController, closed_port

from controller_client.controller.api import (
    ControllerClient,
    ControllerClientConfig,
)
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerError,
    ControllerFailureError,
    ControllerPermissionError,
    ControllerUnavailableError,
    InvalidArgumentError,
)
from controller_client.proto import Controller_pb2 as pb
from segstore_shared import deadline

pytestmark = pytest.mark.integration

# ---- gRPC status codes, retries, deadlines ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError),
        (grpc.StatusCode.INTERNAL, ControllerFailureError),
        (grpc.StatusCode.PERMISSION_DENIED, ControllerPermissionError),
        (grpc.StatusCode.UNAUTHENTICATED, ControllerAuthenticationError),
        (grpc.StatusCode.NOT_FOUND, ControllerFailureError),  # createScope has no "not found" meaning
    ],
)
async def test_grpc_status_maps_to_error(
    controller: ControllerClient, servicer: ScriptedController, code: grpc.StatusCode, error: type[Exception]
) -> None:
    servicer.on("createScope", code)
    with pytest.raises(error) as raised:
        await controller.create_scope("sc")
    assert not raised.value.retriable  # type: ignore[attr-defined]
    assert len(servicer.requests["createScope"]) == 1


async def test_unimplemented_rpc_is_a_failure(controller: ControllerClient) -> None:
    with pytest.raises(ControllerFailureError, match="UNIMPLEMENTED"):
        await controller.scope_exists("sc")


async def test_unavailable_is_retried_until_success(controller: ControllerClient, servicer: ScriptedController) -> None:
    servicer.on(
        "createScope",
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNAVAILABLE,
        pb.CreateScopeStatus(status=pb.CreateScopeStatus.SUCCESS),
    )
    assert await controller.create_scope("sc") is True
    assert len(servicer.requests["createScope"]) == 3


async def test_unavailable_gives_up_after_retry_timeout(fake: tuple[ScriptedController, int]) -> None:
    servicer, port = fake
    servicer.on("createScope", grpc.StatusCode.UNAVAILABLE)
    config = ControllerClientConfig(rpc_timeout_s=5.0, retry_timeout_s=0.4, initial_backoff_s=0.01, max_backoff_s=0.05)
    async with await ControllerClient.connect(f"127.0.0.1:{port}", config) as client:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError, match=r"after 0\.4 s: scripted UNAVAILABLE") as raised:
            await client.create_scope("sc")
        elapsed = time.monotonic() - started
    assert raised.value.retriable and deadline.final(raised.value)  # retriable later, but not by a loop around it
    assert 0.4 <= elapsed < 3.0
    assert len(servicer.requests["createScope"]) >= 3


async def test_backoff_grows_exponentially_with_injected_sleep(fake: tuple[ScriptedController, int]) -> None:
    servicer, port = fake
    servicer.on("createScope", grpc.StatusCode.UNAVAILABLE)
    now = [0.0]
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    config = ControllerClientConfig(
        retry_timeout_s=1.0, initial_backoff_s=0.125, max_backoff_s=0.25, backoff_multiplier=2
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    async with ControllerClient(channel, config, sleep=fake_sleep, clock=lambda: now[0]) as client:
        with pytest.raises(ControllerUnavailableError):
            await client.create_scope("sc")
    assert sleeps == [0.125, 0.25, 0.25, 0.25, 0.125]  # capped at max_backoff_s; the last one cut to the time left
    assert len(servicer.requests["createScope"]) == len(sleeps) + 1


async def test_deadline_is_honoured_and_not_retried(fake: tuple[ScriptedController, int]) -> None:
    servicer, port = fake

    async def slow(request: pb.ScopeInfo) -> pb.CreateScopeStatus:
        await asyncio.sleep(3)
        return pb.CreateScopeStatus()

    servicer.on("createScope", slow)
    config = ControllerClientConfig(rpc_timeout_s=0.3, retry_timeout_s=5.0)
    async with await ControllerClient.connect(f"tcp://127.0.0.1:{port}", config) as client:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError, match=r"did not answer within 0\.3s"):
            await client.create_scope("sc")
        elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2.0
    assert len(servicer.requests["createScope"]) == 1


async def test_closed_port_raises_unavailable_after_retry_timeout() -> None:
    config = ControllerClientConfig(rpc_timeout_s=2.0, retry_timeout_s=0.5, initial_backoff_s=0.02, max_backoff_s=0.1)
    async with await ControllerClient.connect(f"tcp://127.0.0.1:{closed_port()}", config) as client:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError):
            await client.create_scope("sc")
        elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 4.0


async def test_connect_wait_ready_to_closed_port_raises_unavailable() -> None:
    config = ControllerClientConfig(retry_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ControllerUnavailableError, match=r"unreachable after 0\.5 s: connection refused"):
        await ControllerClient.connect(f"127.0.0.1:{closed_port()}", config, wait_ready=True)
    assert 0.5 <= time.monotonic() - started < 3.0


async def test_connect_wait_ready_succeeds_against_a_server(fake: tuple[ScriptedController, int]) -> None:
    servicer, port = fake
    servicer.on("checkScopeExists", pb.ExistsResponse(exists=True))
    async with await ControllerClient.connect(f"127.0.0.1:{port}", FAST, wait_ready=True) as client:
        assert await client.scope_exists("sc") is True


async def test_call_after_close_raises_controller_error(fake: tuple[ScriptedController, int]) -> None:
    client = await ControllerClient.connect(f"127.0.0.1:{fake[1]}", FAST)
    await client.close()
    with pytest.raises(ControllerError):
        await client.scope_exists("sc")


async def test_cancelling_a_call_cancels_the_rpc(fake: tuple[ScriptedController, int]) -> None:
    servicer, port = fake
    started = asyncio.Event()

    async def hang(request: pb.ScopeInfo) -> pb.CreateScopeStatus:
        started.set()
        await asyncio.sleep(30)
        return pb.CreateScopeStatus()

    servicer.on("createScope", hang)
    async with await ControllerClient.connect(f"127.0.0.1:{port}", FAST) as client:
        call = asyncio.create_task(client.create_scope("sc"))
        await asyncio.wait_for(started.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
