"""Which pending records a re-fence acknowledges: exactly those every reader accepts (:func:`stored_run`)."""

from __future__ import annotations

import pytest

from segment_store.tier1.jetstream.client import (
    ERR_WRONG_LAST_SEQUENCE,
    JetStreamRequestError,
    JetStreamUnavailableError,
)
from segment_store.tier1.jetstream.records import KIND_DATA, KIND_FENCE, Record, RecordFilter
from segment_store.tier1.jetstream.refence import refenceable, stored_run
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
