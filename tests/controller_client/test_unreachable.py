"""What a user of the client library sees when nothing answers: a controller or a segment store that cannot be reached
fails the call within one budget (the controller client's ``retry_timeout_s``), with one message naming it and what
to check. Addresses with nothing behind them: a port bound and closed, or one that listens and never answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from controller_client import ControllerClient, StreamManager
from controller_client.blocking.streams import BlockingStreamManager
from controller_client.controller.api import ControllerClientConfig
from controller_client.controller.channel import reach_failure
from controller_client.errors import ControllerUnavailableError
from controller_client.stream_manager import StreamManagerConfig
from segment_store.client import SegmentStoreUnreachableError
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S

pytestmark = pytest.mark.integration

BUDGET_S = 2.0
HINT = "(is the controller running, and is the URI right?)"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a blackhole)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


def test_the_default_budget_is_30_seconds_everywhere() -> None:
    assert ControllerClientConfig().retry_timeout_s == DEFAULT_UNREACHABLE_TIMEOUT_S == 30.0
    assert StreamManagerConfig().retry_timeout_s is None  # the controller client's


async def test_create_scope_against_a_closed_port_fails_within_the_budget() -> None:
    uri = f"tcp://127.0.0.1:{closed_port()}"
    config = ControllerClientConfig(retry_timeout_s=BUDGET_S)
    async with await ControllerClient.connect(uri, config) as controller, StreamManager(controller) as manager:
        assert manager.retry_timeout_s == BUDGET_S
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError) as raised:
            await manager.create_scope("x")
        elapsed = time.monotonic() - started
    assert BUDGET_S * 0.9 <= elapsed < 3 * BUDGET_S
    assert str(raised.value) == f"controller {uri} unreachable after {BUDGET_S:.1f} s: connection refused {HINT}"


async def test_create_scope_against_a_silent_port_fails_within_the_budget(silent_port: int) -> None:
    uri = f"tcp://127.0.0.1:{silent_port}"
    config = ControllerClientConfig(retry_timeout_s=BUDGET_S)
    async with await ControllerClient.connect(uri, config) as controller, StreamManager(controller) as manager:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError) as raised:
            await manager.create_scope("x")
        elapsed = time.monotonic() - started
    assert BUDGET_S * 0.9 <= elapsed < 3 * BUDGET_S
    assert str(raised.value) == f"controller {uri} unreachable after {BUDGET_S:.1f} s: no answer {HINT}"


async def test_the_managers_budget_bounds_a_controller_client_with_a_longer_one() -> None:
    uri = f"tcp://127.0.0.1:{closed_port()}"
    shorter = StreamManagerConfig(retry_timeout_s=BUDGET_S)
    async with await ControllerClient.connect(uri) as controller, StreamManager(controller, config=shorter) as manager:
        assert manager.retry_timeout_s == BUDGET_S  # the controller client's is 30 s
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError, match=r"unreachable after 2\.0 s: connection refused"):
            await manager.stream_exists("x", "y")
        assert time.monotonic() - started < 3 * BUDGET_S


class _DeadSegmentStoreController:
    """A controller whose one segment store is at ``endpoint`` (where nothing answers)."""

    def __init__(self, endpoint: tuple[str, int]) -> None:
        self.endpoint = endpoint
        self.lookups = 0

    async def get_uri(self, scope: str, stream: str, segment_id: int) -> tuple[str, int]:
        self.lookups += 1
        return self.endpoint

    async def get_delegation_token(self, scope: str, stream: str, write: bool = False) -> str:
        return ""


@pytest.mark.parametrize("kind", ["closed", "silent"])
async def test_a_segment_store_that_cannot_be_reached_fails_within_the_budget(kind: str, silent_port: int) -> None:
    port = closed_port() if kind == "closed" else silent_port
    controller = _DeadSegmentStoreController(("127.0.0.1", port))
    config = StreamManagerConfig(retry_timeout_s=BUDGET_S)
    async with StreamManager(controller, config=config) as manager:  # type: ignore[arg-type]
        started = time.monotonic()
        with pytest.raises(SegmentStoreUnreachableError) as raised:
            await manager.segment_info("sc", "st", 0)
        elapsed = time.monotonic() - started
    assert BUDGET_S * 0.9 <= elapsed < 3 * BUDGET_S
    reason = "connection refused" if kind == "closed" else "no answer"
    assert str(raised.value).startswith(f"segment store 127.0.0.1:{port} unreachable after 2.0 s: {reason} (")
    assert "(is the segment store running" in str(raised.value)
    if kind == "closed":  # asked again each time: the container may have moved (a silent one takes the budget)
        assert controller.lookups > 3


def test_the_blocking_manager_passes_its_budget_to_the_controller_client() -> None:
    uri = f"tcp://127.0.0.1:{closed_port()}"
    with BlockingStreamManager.connect(uri, StreamManagerConfig(retry_timeout_s=BUDGET_S)) as manager:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError, match=f"^controller {uri} unreachable after 2.0 s"):
            manager.create_scope("x")
        assert time.monotonic() - started < 3 * BUDGET_S


@pytest.mark.parametrize(
    ("details", "reason"),
    [
        ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused",
         "connection refused"),
        ("last error: UNKNOWN: ipv4:127.0.0.1:1: connection attempt timed out before receiving SETTINGS frame",
         "no answer"),
        ("last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: connect() timed out", "no answer"),
        ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: tcp handshaker shutdown",
         "no answer"),
        ("DNS resolution failed for nowhere.invalid:9090", "the host name does not resolve"),
        ("scripted UNAVAILABLE", "scripted UNAVAILABLE"),  # a controller that answered: what it said
    ],
)  # fmt: skip
def test_what_grpc_says_in_a_few_words(details: str, reason: str) -> None:
    assert reach_failure(details) == reason
