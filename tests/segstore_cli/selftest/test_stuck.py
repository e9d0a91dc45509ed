"""A stuck task's await chain names the line it waits at, down to the future (not only its outermost frame)."""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

import pytest
from rich.console import Console

from segstore_cli.selftest import runner
from segstore_cli.selftest.detections import RollbackWatch
from segstore_shared.stuck import await_chain, innermost, log_pending


async def flush(acks: asyncio.Event) -> None:
    await acks.wait()


FLUSH_WAITS_AT = flush.__code__.co_firstlineno + 1


async def close_writer(acks: asyncio.Event) -> None:
    await flush(acks)


async def test_the_chain_goes_from_the_task_down_to_what_it_awaits() -> None:
    acks = asyncio.Event()
    task = asyncio.create_task(close_writer(acks), name="writer w0")
    await asyncio.sleep(0)  # it runs up to its wait
    chain = await_chain(task)
    assert [line.rsplit(" in ", 1)[-1] for line in chain[:3]] == ["close_writer", "flush", "wait"]
    assert chain[-1].startswith("awaits <Future pending")
    assert innermost(task) == f"test_stuck.py:{FLUSH_WAITS_AT} in flush"
    acks.set()
    await task


async def test_pending_tasks_are_logged_with_their_chains_and_done_ones_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    acks = asyncio.Event()
    stuck = asyncio.create_task(close_writer(acks), name="writer w1")
    done = asyncio.create_task(asyncio.sleep(0), name="writer w2")
    await asyncio.sleep(0)
    await done
    with caplog.at_level(logging.WARNING, logger="segstore_shared.stuck"):
        log_pending("the drain", [stuck, done])
    text = caplog.text
    assert "the drain: 1 task(s) still pending" in text
    assert "task writer w1 waits at:" in text and "in flush" in text
    assert "writer w2" not in text
    acks.set()
    await stuck


class HungWriter:
    """Stands in for a writer whose flush never ends (the hour-long run's drain failure, whose report said only
    that the writers did not drain)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_error: BaseException | None = ConnectionError("server closed the connection")


async def test_a_drain_that_does_not_end_names_the_writer_the_line_and_its_last_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runner, "DRAIN_TIMEOUT_S", 0.2)
    selftest = runner.Selftest(runner.SelftestConfig(duration_s=1), Console(file=io.StringIO()))
    acks = asyncio.Event()
    hung, idle = HungWriter("w0"), HungWriter("w1")
    txn_writer = HungWriter("txns")
    txn_writer.last_error = None
    loads = [
        asyncio.create_task(close_writer(acks), name="writer w0"),
        asyncio.create_task(asyncio.sleep(0), name="writer w1"),
        asyncio.create_task(asyncio.sleep(0), name="transaction writer"),
    ]
    with caplog.at_level(logging.WARNING), pytest.raises(runner.StuckOrFailed) as failure:
        await selftest._drain([hung, idle], txn_writer, loads, RollbackWatch({}))  # type: ignore[arg-type]
    assert str(failure.value) == (
        f"the writers did not drain within 0 s: writer w0 at test_stuck.py:{FLUSH_WAITS_AT} in flush (last error "
        "ConnectionError('server closed the connection')) (every pending task's await chain is in "
        "logs/selftest.log)"
    )
    assert "task writer w0 waits at:" in caplog.text
    acks.set()
    await asyncio.gather(*loads)
