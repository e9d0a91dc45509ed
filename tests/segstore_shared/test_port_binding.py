"""Listening ports bound exclusively and named when taken (:mod:`segstore_shared.ports`): the check a command runs
before it starts anything, and the error each server raises when it cannot listen after all (gRPC, the wire port, a
metrics port, a child server whose port was taken since the check), as the one line the commands print.

Every port here is one the test bound itself on port 0 (never a fixed one)."""

from __future__ import annotations

import argparse
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from prometheus_client import CollectorRegistry
from python_child import ChildConfig, ChildStartError, PythonChild

from controller.core import ControllerCore
from controller.rpc.servicer import start_grpc_server
from segment_store.server.service import SegmentStoreService
from segstore_cli.commands import nats as nats_command
from segstore_cli.main import main
from segstore_shared.metrics_http import MetricsServer
from segstore_shared.ports import (
    IN_USE,
    PortClaim,
    PortInUseError,
    bind_error,
    in_use_line,
    unavailable,
)
from segstore_shared.processes import port_is_free

pytestmark = pytest.mark.integration


def listening(reuse_port: bool = False) -> socket.socket:
    """A socket listening on a free loopback port (with ``SO_REUSEPORT`` as gRPC sets it by default, if asked)."""
    sock = socket.socket()
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port something listens on for the test's duration."""
    with listening() as sock:
        yield sock.getsockname()[1]


def free_twin() -> tuple[socket.socket, int]:
    """A listening socket on a port whose predecessor is free: (the socket, that free port)."""
    for _ in range(50):
        sock = listening()
        port = sock.getsockname()[1]
        if port_is_free("127.0.0.1", port - 1):
            return sock, port - 1
        sock.close()
    raise AssertionError("no free port before a free port in 50 tries")


def test_bind_error_with_a_listener_sharing_by_so_reuseport() -> None:
    with listening(reuse_port=True) as sock:
        error = bind_error("127.0.0.1", sock.getsockname()[1])
    assert error is not None and "in use" in str(error)


def test_unavailable_names_the_flag_and_the_port(taken: int) -> None:
    claims = [PortClaim("--controller-port", "127.0.0.1", 0), PortClaim("--segmentstore-port", "127.0.0.1", taken)]
    problem = unavailable(claims)
    assert problem is not None
    claim, why = problem
    assert claim.line(why) == f"--segmentstore-port {taken}: address already in use"


def test_unavailable_with_every_port_free_or_any() -> None:
    with listening() as sock:
        port = sock.getsockname()[1]
    assert unavailable([PortClaim("--port", "127.0.0.1", port), PortClaim("--metrics-port", "127.0.0.1", 0)]) is None


def test_unavailable_with_one_port_given_twice() -> None:
    claims = [PortClaim("--controller-port", "127.0.0.1", 5), PortClaim("--segmentstore-port", "127.0.0.1", 5)]
    problem = unavailable(claims)
    assert problem is not None
    assert problem[0].line(problem[1]) == "--segmentstore-port 5: also given by --controller-port"


def test_unavailable_with_no_tcp_port() -> None:
    problem = unavailable([PortClaim("--port", "127.0.0.1", 70000)])
    assert problem is not None and problem[0].line(problem[1]).startswith("--port 70000: not a TCP port")


def test_derived_port_line_names_the_flag_its_value_and_the_port() -> None:
    claim = PortClaim("--metrics-port", "127.0.0.1", 9101, 9100, "the segment store's metrics")
    assert claim.line(IN_USE) == "--metrics-port 9100: port 9101 (the segment store's metrics): address already in use"


def test_in_use_line_without_a_claim_of_the_port() -> None:
    error = PortInUseError("wire port", "127.0.0.1", 4)
    assert in_use_line([PortClaim("--port", "127.0.0.1", 5)], error) == "wire port 127.0.0.1:4 is already in use"


async def test_grpc_server_on_a_port_a_reuseport_listener_holds_raises_instead_of_sharing() -> None:
    with listening(reuse_port=True) as sock:  # what another controller's gRPC server looks like to the kernel
        port = sock.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"controller gRPC port 127.0.0.1:{port} is already in use"):
            await start_grpc_server(cast(ControllerCore, object()), "127.0.0.1", port, 4)


async def test_grpc_server_is_exclusive_to_a_second_reuseport_listener() -> None:
    server, port = await start_grpc_server(cast(ControllerCore, object()), "127.0.0.1", 0, 4)
    try:
        with socket.socket() as second:
            second.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError, match="in use"):
                second.bind(("127.0.0.1", port))
    finally:
        await server.stop(None)


async def test_metrics_server_on_a_taken_port(taken: int) -> None:
    with pytest.raises(PortInUseError, match=f"metrics port 127.0.0.1:{taken} is already in use"):
        await MetricsServer(CollectorRegistry(), lambda: True).start("127.0.0.1", taken)


async def test_metrics_server_is_exclusive() -> None:
    server = MetricsServer(CollectorRegistry(), lambda: True)
    await server.start("127.0.0.1", 0)
    try:
        assert bind_error("127.0.0.1", server.endpoint[1]) is not None
        with pytest.raises(PortInUseError):
            await MetricsServer(CollectorRegistry(), lambda: True).start("127.0.0.1", server.endpoint[1])
    finally:
        await server.stop()


async def test_segment_store_on_a_taken_wire_port(taken: int) -> None:
    with pytest.raises(PortInUseError, match=f"wire port 127.0.0.1:{taken} is already in use"):
        await SegmentStoreService.start_in_memory(1, taken)


class ChildPortInUseError(ChildStartError, PortInUseError):
    pass


class NamingChild(PythonChild):
    port_in_use_error = ChildPortInUseError


WAIT_THEN_FAIL = (
    "import pathlib, sys, time; go = pathlib.Path(sys.argv[1]).with_name('go')\n"
    "while not go.exists(): time.sleep(0.02)\n"
    "print('cannot bind', flush=True); sys.exit(1)"
)


def test_child_server_that_exits_with_its_port_taken_since_the_check_names_it(tmp_path: Path) -> None:
    with listening() as sock:
        port = sock.getsockname()[1]
    server = NamingChild(ChildConfig(tmp_path / "a", WAIT_THEN_FAIL, port))
    server.launch()  # the port was free at the check
    with listening() as sock, socket.socket() as late:
        sock.close()
        late.bind(("127.0.0.1", port))  # another process takes it before the server binds
        late.listen()
        (tmp_path / "a" / "go").touch()
        with pytest.raises(ChildPortInUseError, match=f"port 127.0.0.1:{port} is already in use"):
            server.wait_ready(time.monotonic() + 20)
    assert server.pid is None


def test_child_server_that_exits_with_its_ports_free_raises_its_log_tail(tmp_path: Path) -> None:
    with listening() as sock:
        port = sock.getsockname()[1]
    server = NamingChild(ChildConfig(tmp_path / "a", WAIT_THEN_FAIL, port))
    server.launch()
    (tmp_path / "a" / "go").touch()
    with pytest.raises(ChildStartError, match="did not start; log tail:\ncannot bind") as raised:
        server.wait_ready(time.monotonic() + 20)
    assert not isinstance(raised.value, PortInUseError)


def test_segmentstore_command_whose_port_is_taken_after_the_check_exits_2_naming_it(
    taken: int, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from segstore_cli.commands import segmentstore

    monkeypatch.setattr(segmentstore, "check_ports", lambda command, claims: None)  # the race: free at the check
    assert main(["segmentstore", "--in-memory", "--port", str(taken), "--container-count", "1"]) == 2
    assert capfd.readouterr().err.splitlines()[-1] == f"segstore segmentstore: --port {taken}: address already in use"


def test_nats_monitor_port_default_where_taken_is_a_free_one(taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nats_command, "MONITOR_PORT", taken)
    with listening() as sock:
        client = sock.getsockname()[1]
    args = argparse.Namespace(nodes=2, host="127.0.0.1", port=client, http_port=None, cluster_port=0)
    ports = nats_command._choose_ports(args)
    assert ports.client == [client, client + 1]
    assert taken not in ports.http and len(set(ports.http + ports.client + (ports.cluster or []))) == 6
    assert unavailable([claim for claim in ports.claims if claim.flag != "--port"]) is None


def test_nats_monitor_port_default_where_free_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    sock, free = free_twin()  # free, free + 1 (held now, so the second node's default is taken)
    with sock:
        monkeypatch.setattr(nats_command, "MONITOR_PORT", free)
        args = argparse.Namespace(nodes=2, host="127.0.0.1", port=0, http_port=None, cluster_port=None)
        assert free not in nats_command._choose_ports(args).http  # --port 0: free ones, never the defaults
        args.port = 40000
        http = nats_command._choose_ports(args).http
    assert http[0] == free and http[1] != free + 1
