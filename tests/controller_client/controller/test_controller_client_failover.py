"""ControllerClient with a list of controllers (``tcp://h1:p1,h2:p2``) against scripted in-test gRPC controllers:
a call that fails with UNAVAILABLE moves to the next controller at once, round robin, backs off only after a whole
round, stays within the one budget, and the next call starts at the controller that answered last. With TLS each
controller's certificate is checked against its own host name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import trustme
from scripted_controller import FAST, ScriptedController, closed_port

from controller_client.controller.api import ControllerClient, ControllerClientConfig
from controller_client.errors import ControllerTlsError, ControllerUnavailableError
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc
from segstore_shared import deadline

pytestmark = pytest.mark.integration

OK = pb.CreateScopeStatus(status=pb.CreateScopeStatus.SUCCESS)
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


class Logged(ScriptedController):
    """A scripted controller that notes each request in a log shared with the others: who was asked, in order."""

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__()
        self.name = name
        self.log = log

    async def _play(self, rpc: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.log.append(self.name)
        return await super()._play(rpc, request, context)


@asynccontextmanager
async def controllers(*names: str) -> AsyncIterator[tuple[list[Logged], str]]:
    """Scripted controllers named ``names`` and the URI listing them in that order."""
    log: list[str] = []
    servers, servicers, hosts = [], [], []
    try:
        for name in names:
            servicer = Logged(name, log)
            server = grpc.aio.server()
            pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)
            hosts.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
            await server.start()
            servers.append(server)
            servicers.append(servicer)
        yield servicers, "tcp://" + ",".join(hosts)
    finally:
        for server in servers:
            await server.stop(grace=None)


def manual_clock() -> tuple[list[float], list[float], Any, Any]:
    now, sleeps = [0.0], []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    return now, sleeps, sleep, lambda: now[0]


async def connect_manual(uri: str, config: ControllerClientConfig, sleep: Any, clock: Any) -> ControllerClient:
    """A client of the URI's controllers with an injected sleep and clock (as ``connect`` builds it)."""
    connected = await ControllerClient.connect(uri, config)
    client = ControllerClient(
        connected._endpoints[0].channel,
        config,
        address=connected._endpoints[0].address,
        fallbacks=[(e.channel, e.address) for e in connected._endpoints[1:] if e.address is not None],
        sleep=sleep,
        clock=clock,
    )
    return client


async def test_unavailable_moves_to_the_next_controller_at_once_and_stays_there() -> None:
    async with controllers("a", "b") as ([a, b], uri):
        a.on("createScope", UNAVAILABLE)
        b.on("createScope", OK)
        _, sleeps, sleep, clock = manual_clock()
        async with await connect_manual(uri, FAST, sleep, clock) as client:
            assert await client.create_scope("sc") is True
            assert a.log == ["a", "b"] and sleeps == []  # no pause before the next controller
            assert await client.create_scope("sc") is True
            assert a.log == ["a", "b", "b"]  # the next call starts at the one that answered
            assert client.current_target == uri.split(",")[1]


async def test_failover_is_round_robin_and_wraps_around() -> None:
    async with controllers("a", "b", "c") as ([a, b, c], uri):
        a.on("createScope", UNAVAILABLE, OK)
        b.on("createScope", UNAVAILABLE)
        c.on("createScope", OK, UNAVAILABLE)
        _, sleeps, sleep, clock = manual_clock()
        async with await connect_manual(uri, FAST, sleep, clock) as client:
            assert await client.create_scope("sc") is True  # a, b fail; c answers
            assert await client.create_scope("sc") is True  # c fails; a (wrapping around) answers
        assert a.log == ["a", "b", "c", "c", "a"]
        assert sleeps == []


async def test_a_whole_round_of_failures_backs_off_then_goes_round_again() -> None:
    async with controllers("a", "b") as ([a, b], uri):
        a.on("createScope", UNAVAILABLE)
        b.on("createScope", UNAVAILABLE)
        _, sleeps, sleep, clock = manual_clock()
        config = ControllerClientConfig(retry_timeout_s=1.0, initial_backoff_s=0.125, max_backoff_s=0.25)
        async with await connect_manual(uri, config, sleep, clock) as client:
            with pytest.raises(ControllerUnavailableError) as raised:
                await client.create_scope("sc")
        assert sleeps == [0.125, 0.25, 0.25, 0.25, 0.125]  # one pause per round, as with one controller per attempt
        assert a.log == ["a", "b"] * len(sleeps) + ["a"]  # the budget is spent after the first try of the last round
        message = str(raised.value)
        first = uri.split(",")[0].removeprefix("tcp://")
        assert message.startswith(f"controllers {uri} unreachable after 1.0 s: last {first}: ")
        assert "scripted UNAVAILABLE (are the controllers running, and is the URI right?)" in message
        assert deadline.final(raised.value)


async def test_a_dead_controller_first_in_the_list_is_passed_over() -> None:
    async with controllers("live") as ([live], uri):
        live.on("createScope", OK)
        live.on("getControllerServerList", pb.ServerResponse())
        listed = f"tcp://127.0.0.1:{closed_port()},{uri.removeprefix('tcp://')}"
        started = time.monotonic()
        async with await ControllerClient.connect(listed, FAST, wait_ready=True) as client:
            assert await client.create_scope("sc") is True
        assert time.monotonic() - started < 3.0  # refused at once: no waiting out a budget


async def test_all_controllers_down_gives_one_message_naming_the_list_within_the_budget() -> None:
    dead = [closed_port(), closed_port()]
    uri = f"tcp://127.0.0.1:{dead[0]},127.0.0.1:{dead[1]}"
    config = ControllerClientConfig(rpc_timeout_s=2.0, retry_timeout_s=0.5, initial_backoff_s=0.02, max_backoff_s=0.1)
    started = time.monotonic()
    with pytest.raises(ControllerUnavailableError) as raised:
        await ControllerClient.connect(uri, config, wait_ready=True)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 3.0  # one budget for the whole list, not one per controller
    assert str(raised.value).startswith(f"controllers {uri} unreachable after 0.5 s: last 127.0.0.1:")
    assert "connection refused (are the controllers running, and is the URI right?)" in str(raised.value)


async def test_a_missed_deadline_is_not_repeated_but_the_next_call_tries_the_next_controller() -> None:
    async def slow(request: pb.ScopeInfo) -> pb.CreateScopeStatus:
        await asyncio.sleep(3)
        return OK

    async with controllers("a", "b") as ([a, b], uri):
        a.on("createScope", slow)
        b.on("createScope", OK)
        config = ControllerClientConfig(rpc_timeout_s=0.3, retry_timeout_s=5.0)
        async with await ControllerClient.connect(uri, config) as client:
            with pytest.raises(ControllerUnavailableError, match=r"did not answer within 0\.3s"):
                await client.create_scope("sc")  # a may have acted: not repeated elsewhere
            assert a.log == ["a"]
            assert await client.create_scope("sc") is True
        assert a.log == ["a", "b"]


@asynccontextmanager
async def tls_controllers(base: Path, *names: str) -> AsyncIterator[tuple[list[Logged], str, Path]]:
    """Scripted TLS controllers on 127.0.0.1, each with a certificate naming only the host name given (one CA), and
    the URI listing them all as ``localhost``, and the CA's certificate (the trust store)."""
    ca = trustme.CA(organization_name="segstore failover test CA")
    trust_store = base / "ca.pem"
    ca.cert_pem.write_to_path(str(trust_store))
    log: list[str] = []
    servers, servicers, hosts = [], [], []
    try:
        for position, name in enumerate(names):
            issued = ca.issue_cert(name)
            credentials = grpc.ssl_server_credentials(
                [(issued.private_key_pem.bytes(), b"".join(pem.bytes() for pem in issued.cert_chain_pems))]
            )
            servicer = Logged(f"{position}:{name}", log)
            server = grpc.aio.server()
            pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)
            hosts.append(f"localhost:{server.add_secure_port('127.0.0.1:0', credentials)}")
            await server.start()
            servers.append(server)
            servicers.append(servicer)
        yield servicers, "tls://" + ",".join(hosts), trust_store
    finally:
        for server in servers:
            await server.stop(grace=None)


async def test_tls_checks_each_controller_against_its_own_name_and_leaves_out_one_that_does_not_fit(
    tmp_path: Path,
) -> None:
    async with tls_controllers(tmp_path, "other.example", "localhost") as ([wrong, right], uri, trust_store):
        right.on("createScope", OK)
        config = ControllerClientConfig(retry_timeout_s=10.0, initial_backoff_s=0.01, trust_store=str(trust_store))
        async with await ControllerClient.connect(uri, config) as client:
            assert await client.create_scope("sc") is True
        assert right.log == ["1:localhost"] and not wrong.requests  # the first's certificate names another host


async def test_tls_error_comes_at_once_when_no_controller_of_the_list_fits(tmp_path: Path) -> None:
    async with tls_controllers(tmp_path, "a.example", "b.example") as (_, uri, trust_store):
        config = ControllerClientConfig(retry_timeout_s=30.0, trust_store=str(trust_store))
        started = time.monotonic()
        async with await ControllerClient.connect(uri, config) as client:
            with pytest.raises(ControllerTlsError) as raised:
                await client.create_scope("sc")
        assert time.monotonic() - started < 15.0  # not the whole budget
    message = str(raised.value)
    assert message.startswith("createScope: TLS to controllers localhost:")
    assert message.count("does not name host 'localhost'") == 2, message
