"""The drain's transaction resolution: a transaction the controller no longer knows (its outcome forgotten
``completed_txn_ttl_s`` after it completed) is resolved, not waited for until the drain fails."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from controller_client.model import TxnState
from segstore_cli.selftest.checker import Checker, TxnOutcome
from segstore_cli.selftest.workload import LoadStats, TxnWriter

pytestmark = pytest.mark.unit


class Controller:
    def __init__(self, states: dict[uuid.UUID, TxnState]) -> None:
        self.states = states

    async def check_transaction_state(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState:
        return self.states[txn_id]


def writer_with(states: dict[str, TxnState], checker: Checker) -> TxnWriter:
    ids = {name: uuid.uuid4() for name in states}
    manager = SimpleNamespace(
        controller=Controller({ids[name]: state for name, state in states.items()}),
        create_txn_writer=lambda *args, **kwargs: None,
    )
    writer = TxnWriter(manager, "s", "txns", checker, LoadStats(), 4, 1.0, 7, lease_ms=10_000)  # type: ignore[arg-type]
    writer.txns = ids
    return writer


async def test_a_transaction_the_controller_forgot_is_resolved_and_its_outcome_left_to_the_final_reads() -> None:
    checker = Checker()
    for name in ("forgotten", "failed-commit", "committed"):
        checker.txn_begun(name, {"k1": 1})
    checker.txn_ended("failed-commit", TxnOutcome.UNKNOWN)  # its commit call failed: the client does not know
    checker.txn_ended("committed", TxnOutcome.COMMITTED)
    writer = writer_with(
        {"forgotten": TxnState.UNKNOWN, "failed-commit": TxnState.UNKNOWN, "committed": TxnState.COMMITTED}, checker
    )

    await writer.resolve(deadline_s=1.0)  # before, it waited on the forgotten ones and then failed

    assert checker.unresolved_txns() == ["forgotten", "failed-commit"]  # finish() checks them: all events or none
    assert checker.committed_txns() == ["committed"]


async def test_a_transaction_still_committing_fails_the_resolution_naming_its_state() -> None:
    checker = Checker()
    checker.txn_begun("slow", {"k1": 1})
    checker.txn_ended("slow", TxnOutcome.COMMITTED)
    writer = writer_with({"slow": TxnState.COMMITTING}, checker)
    with pytest.raises(TimeoutError, match=r"1 transactions still not committed or aborted \(COMMITTING 1\)"):
        await writer.resolve(deadline_s=0.2)
