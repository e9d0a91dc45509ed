"""The controller-backed token source: one fetch per stream until the token nears its exp, READ_UPDATE asked
only for changes (and then serving reads too), renewed when a segment store says it expired."""

from __future__ import annotations

import pytest

from controller_client.controller.delegation_tokens import ControllerTokens
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenSigner

pytestmark = pytest.mark.unit


class Controller:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.asked: list[tuple[str, str, bool]] = []

    async def fetch(self, scope: str, stream: str, write: bool) -> str:
        self.asked.append((scope, stream, write))
        permission = Permission.READ_UPDATE if write else Permission.READ
        return TokenSigner("k", 600, clock=lambda: self.clock[0]).sign(
            f"prn::/scope:{scope}/stream:{stream}", permission
        )


async def test_tokens_are_kept_per_stream_until_they_near_expiry() -> None:
    clock = [1_000.0]
    controller = Controller(clock)
    tokens = ControllerTokens(controller.fetch, refresh_before_s=5, clock=lambda: clock[0])
    first = await tokens.token("a/s/0.#epoch.0", write=False)
    assert await tokens.token("a/s/1.#epoch.2#transaction.0011", write=False) == first
    assert controller.asked == [("a", "s", False)]
    upgraded = await tokens.token("a/s/0.#epoch.0", write=True)
    assert upgraded != first and controller.asked[-1] == ("a", "s", True)
    assert await tokens.token("a/s/0.#epoch.0", write=False) == upgraded  # a READ_UPDATE token serves reads
    clock[0] += 594
    assert await tokens.token("a/s/0.#epoch.0", write=True) == upgraded
    clock[0] += 1  # 5 s before exp: renewed
    assert await tokens.token("a/s/0.#epoch.0", write=True) != upgraded
    assert len(controller.asked) == 3


async def test_an_expired_report_renews_and_other_streams_are_apart() -> None:
    clock = [1_000.0]
    controller = Controller(clock)
    tokens = ControllerTokens(controller.fetch, clock=lambda: clock[0])
    await tokens.token("a/s/0.#epoch.0", write=True)
    await tokens.token("a/rg_kvtable/0.#epoch.0", write=True)
    tokens.expired("a/s/0.#epoch.0")
    await tokens.token("a/s/0.#epoch.0", write=True)
    await tokens.token("a/rg_kvtable/0.#epoch.0", write=True)
    assert controller.asked == [("a", "s", True), ("a", "rg_kvtable", True), ("a", "s", True)]
    assert await tokens.token("", write=True) == ""


async def test_an_empty_token_with_authentication_off_is_kept() -> None:
    asked: list[str] = []

    async def fetch(scope: str, stream: str, write: bool) -> str:
        asked.append(stream)
        return ""

    tokens = ControllerTokens(fetch)
    for _ in range(3):
        assert await tokens.token("a/s/0.#epoch.0", write=True) == ""
    assert asked == ["s"]
