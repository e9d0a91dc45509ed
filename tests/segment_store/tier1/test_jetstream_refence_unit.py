"""Which pending records a re-fence acknowledges: exactly those every reader accepts (:func:`stored_run`); and the
rollback check's reading of a stream that looks short (:func:`settled_state`)."""

from __future__ import annotations

import asyncio
import functools

import pytest

from segment_store.tier1.jetstream.client import (
    ERR_WRONG_LAST_SEQUENCE,
    JetStreamRequestError,
    JetStreamUnavailableError,
    StreamState,
)
from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.records import KIND_DATA, KIND_FENCE, Record, RecordFilter
from segment_store.tier1.jetstream.refence import refenceable, stored_run
from segment_store.tier1.jetstream.stream_setup import settled_state
from segment_store.tier1.log import DataLogCorruptedError


def data(sequence: int, epoch: int, index: int, count: int = 1) -> Record:
    body = b"x" if count == 1 else b"".join(len(b"x").to_bytes(4, "big") + b"x" for _ in range(count))
    return Record(sequence, KIND_DATA, epoch, index, count, body)


def fence(sequence: int, epoch: int) -> Record:
    return Record(sequence, KIND_FENCE, epoch, 0, 0, b"")


def readers_take(records: list[Record], epoch: int, next_index: int) -> list[int]:
    """The sequences a reader accepts from ``records`` having read epoch's run up to ``next_index``."""
    reader = RecordFilter()
    reader.accept(fence(0, epoch))
    for index in range(next_index):
        reader.accept(data(0, epoch, index))
    return [address.ledger_id for record in records for address, _ in reader.accept(record)]


CASES = {
    "all stored": ([data(10, 2, 5), data(11, 2, 6, 3), fence(12, 3)], [10, 11]),
    "the first lost, a later one realigned": ([fence(10, 3), data(11, 2, 6)], []),
    "a break in the run": ([data(10, 2, 5), data(11, 2, 7), fence(12, 3)], [10]),
    "a zombie's older records skipped": ([data(10, 1, 40), data(11, 2, 5), fence(12, 3)], [11]),
    "our fence published twice": ([data(10, 2, 5), fence(11, 3), data(12, 2, 6), fence(13, 3)], [10]),
    "an old fence of ours again": ([fence(10, 2), data(11, 2, 5), fence(12, 3)], [11]),
}


@pytest.mark.parametrize("case", CASES)
def test_the_run_is_what_readers_accept(case: str) -> None:
    records, expected = CASES[case]
    run = stored_run(records, 2, 5)
    assert [record.sequence for record in run] == expected
    entries = [sequence for sequence in readers_take(records, 2, 5) if sequence in expected]
    assert sorted(set(entries)) == expected


def test_data_of_a_higher_epoch_before_its_fence_is_corruption() -> None:
    with pytest.raises(DataLogCorruptedError, match="message 10: data of epoch 4"):
        stored_run([data(10, 4, 0)], 2, 5)


def test_only_leaderless_and_out_of_place_refusals_are_healed_by_a_refence() -> None:
    assert refenceable(JetStreamUnavailableError("status 503"))
    assert refenceable(JetStreamRequestError("wrong last sequence: 7", 400, ERR_WRONG_LAST_SEQUENCE))
    assert not refenceable(JetStreamRequestError("message size exceeds maximum allowed", 400, 10054))
    assert not refenceable(JetStreamRequestError("record stored at 9, not at 8"))


class LaggingStateClient:
    """Answers ``stream_state`` with a last sequence that catches up with the stream after ``stale`` answers (a
    stream leader elected moments ago), or never (``stale`` None: a stream rolled back)."""

    def __init__(self, stale: int | None, short: int, full: int) -> None:
        self.stale, self.short, self.full, self.asked = stale, short, full, 0

    async def stream_state(self, stream: str) -> StreamState:
        self.asked += 1
        behind = self.stale is None or self.asked <= self.stale
        return StreamState(first_seq=1, last_seq=self.short if behind else self.full, messages=0, replicas=3)


def test_a_short_stream_state_is_read_again_before_a_rollback_is_concluded() -> None:
    """The rollback check reads a stream that ends before the acknowledged mark again for ``request_timeout_s``: a
    leader that lags a moment (seen in the self-test: one record short, complete the next moment) is not a
    rollback, a stream that stays short is (its last answer is returned); a stream that reaches the mark, or a log
    without one, is read once."""
    config = JetStreamLogConfig(servers=("nats://127.0.0.1:1",), request_timeout_s=0.5)
    settle = functools.partial(settled_state, config, stream="s")
    lagging = LaggingStateClient(stale=2, short=3379, full=3380)
    assert asyncio.run(settle(lagging, at_least=3380)).last_seq == 3380 and lagging.asked == 3  # type: ignore[arg-type]
    rolled_back = LaggingStateClient(stale=None, short=3379, full=3380)
    assert asyncio.run(settle(rolled_back, at_least=3380)).last_seq == 3379 and rolled_back.asked > 2  # type: ignore[arg-type]
    for mark in (3379, None):
        once = LaggingStateClient(stale=None, short=3379, full=3380)
        assert asyncio.run(settle(once, at_least=mark)).last_seq == 3379 and once.asked == 1  # type: ignore[arg-type]
