"""The JetStream log's records and its record filter, including a model of the fencing argument.

The model replays what JetStream does with ``Nats-Expected-Last-Sequence``: a data record
is stored only when the stream's last sequence is the one it expects; a fence is always
stored. Two owners interleave arbitrarily (hypothesis picks the order in which their
pipelined publishes reach the stream); each acknowledges an entry only when it and every
earlier one were stored. A third owner then reads the whole stream through the filter:
it must see every acknowledged entry, each owner's entries as an unbroken prefix of its
call order, and the older owner's before the newer one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from segment_store.tier1.jetstream.metadata import JetStreamLogMetadata
from segment_store.tier1.jetstream.records import (
    EXPECTED_LAST_SEQUENCE,
    KIND_DATA,
    KIND_FENCE,
    Record,
    RecordFilter,
    data_headers,
    fence_headers,
    group_body,
    parse_record,
)
from segment_store.tier1.log import DataLogCorruptedError, LogAddress

pytestmark = pytest.mark.unit


def fence(sequence: int, epoch: int) -> Record:
    return parse_record(sequence, fence_headers(epoch), b"")


def data(sequence: int, epoch: int, index: int, count: int = 1) -> Record:
    entries = [f"{epoch}/{index + i}".encode() for i in range(count)]
    return parse_record(sequence, data_headers(epoch, index, sequence - 1, count), group_body(entries))


def accepted(records: list[Record], start: LogAddress | None = None) -> list[tuple[int, int]]:
    keep = RecordFilter(start)
    return [(address.epoch, address.entry_id) for r in records for address, _ in keep.accept(r)]


def test_parse_record_with_data_and_fence_headers() -> None:
    record = parse_record(7, data_headers(3, 5, 6), b"x")
    assert (record.kind, record.epoch, record.index, record.count, record.body) == (KIND_DATA, 3, 5, 1, b"x")
    assert record.entries() == [(LogAddress(ledger_id=7, entry_id=5, epoch=3), b"x")]
    assert data_headers(3, 5, 6)[EXPECTED_LAST_SEQUENCE] == "6"
    assert parse_record(1, fence_headers(2), b"").kind == KIND_FENCE


def test_group_record_holds_its_entries_in_order() -> None:
    entries = [b"", b"a", b"bc" * 1000]
    record = parse_record(9, data_headers(2, 10, 8, count=3), group_body(entries))
    assert record.entries() == [(LogAddress(9, 10 + i, 2), entry) for i, entry in enumerate(entries)]
    assert group_body([b"only"]) == b"only"  # one entry: the body is the entry


@pytest.mark.parametrize("body", [b"", b"\x00\x00\x00\x05abc", group_body([b"a", b"b"]) + b"x", group_body([b"a"] * 3)])
def test_group_record_that_does_not_parse(body: bytes) -> None:
    record = parse_record(9, data_headers(2, 0, 8, count=2), body)
    with pytest.raises(DataLogCorruptedError, match="does not parse"):
        record.entries()


@pytest.mark.parametrize(
    "headers",
    [None, {}, {"Segstore-Kind": "data", "Segstore-Epoch": "1"}, {"Segstore-Kind": "other", "Segstore-Epoch": "1"},
     {"Segstore-Kind": "fence", "Segstore-Epoch": "zero"}, {"Segstore-Kind": "fence", "Segstore-Epoch": "0"}],
)  # fmt: skip
def test_parse_record_with_foreign_message(headers: dict[str, str] | None) -> None:
    with pytest.raises(DataLogCorruptedError, match="message 4 is not a segstore Tier-1 record"):
        parse_record(4, headers, b"")


def test_filter_with_fenced_zombie_records_after_the_fence() -> None:
    records = [fence(1, 1), data(2, 1, 0), data(3, 1, 1), fence(4, 2), data(5, 1, 3), data(6, 2, 0), data(7, 1, 4)]
    assert accepted(records) == [(1, 0), (1, 1), (2, 0)]


def test_filter_with_break_in_a_run_drops_the_rest_of_that_epoch() -> None:
    records = [fence(1, 1), data(2, 1, 0), data(3, 1, 2), data(4, 1, 3), fence(5, 2), data(6, 2, 0), data(7, 2, 1)]
    assert accepted(records) == [(1, 0), (2, 0), (2, 1)]


def test_filter_with_late_fence_of_lower_or_same_epoch() -> None:
    records = [fence(1, 3), data(2, 3, 0), fence(3, 2), fence(4, 3), data(5, 3, 1)]
    assert accepted(records) == [(3, 0), (3, 1)]


def test_filter_with_data_above_the_highest_fence() -> None:
    with pytest.raises(DataLogCorruptedError, match="without a fence"):
        accepted([fence(1, 1), data(2, 2, 0)])


def test_filter_starting_after_a_truncation_point() -> None:
    start = LogAddress(ledger_id=10, entry_id=4, epoch=2)
    records = [data(11, 1, 9), data(12, 2, 5), data(13, 2, 7), fence(14, 3), data(15, 3, 0)]
    assert accepted(records, start) == [(2, 5), (3, 0)]


def test_filter_starting_inside_the_group_holding_the_truncation_point() -> None:
    start = LogAddress(ledger_id=10, entry_id=4, epoch=2)  # entries 3..6 are one record; 3 and 4 were discarded
    assert accepted([data(10, 2, 3, count=4), data(11, 2, 7, count=2)], start) == [(2, 5), (2, 6), (2, 7), (2, 8)]
    whole = LogAddress(ledger_id=10, entry_id=6, epoch=2)  # the record's last entry: nothing of it is left
    assert accepted([data(10, 2, 3, count=4), data(11, 2, 7)], whole) == [(2, 7)]
    assert accepted([data(11, 2, 7)], whole) == [(2, 7)]  # the record itself purged


def test_filter_with_groups_and_a_break() -> None:
    records = [fence(1, 1), data(2, 1, 0, count=3), data(3, 1, 3, count=2), data(4, 1, 6), data(5, 1, 7)]
    assert accepted(records) == [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4)]


def test_metadata_round_trip_and_forward_only_truncation() -> None:
    metadata = JetStreamLogMetadata.new("a").fenced_by("b")
    truncated = metadata.truncated(LogAddress(9, 2, 2))
    assert truncated.truncated(LogAddress(5, 0, 1)) is truncated
    assert JetStreamLogMetadata.parse(truncated.serialize()) == truncated
    assert (truncated.epoch, truncated.owner) == (2, "b")
    with pytest.raises(DataLogCorruptedError):
        JetStreamLogMetadata.parse(b'{"format": 1, "epoch": 1}')


# -- a model of two owners racing on one stream ------------------------------------------


@dataclass
class Owner:
    epoch: int
    fence_seq: int = 0
    last_seq: int = 0  # what its next record expects
    sent: int = 0  # entries published (indexes 0..sent-1)
    in_flight: list[tuple[int, int]] = field(default_factory=list)  # (index, expected last sequence), FIFO
    outcomes: dict[int, bool] = field(default_factory=dict)
    failed: bool = False

    @property
    def acknowledged(self) -> list[int]:
        done = []
        for index in range(self.sent):
            if not self.outcomes.get(index, False):
                break
            done.append(index)
        return done


@dataclass
class Stream:
    records: list[Record] = field(default_factory=list)

    def store_fence(self, epoch: int) -> int:
        self.records.append(fence(len(self.records) + 1, epoch))
        return len(self.records)

    def deliver(self, owner: Owner) -> None:
        index, expected = owner.in_flight.pop(0)
        ok = expected == len(self.records)
        if ok:
            self.records.append(data(len(self.records) + 1, owner.epoch, index))
        owner.outcomes[index] = ok
        if not ok:
            owner.failed = True  # it stops publishing; what is in flight still arrives


def send(owner: Owner) -> None:
    if owner.failed or owner.fence_seq == 0:
        return
    owner.in_flight.append((owner.sent, owner.last_seq))
    owner.last_seq += 1
    owner.sent += 1


@settings(max_examples=1000, deadline=None)
@given(
    before=st.integers(min_value=0, max_value=4),
    steps=st.lists(st.sampled_from(["old-send", "old-arrive", "new-send", "new-arrive", "fence"]), max_size=40),
)
@example(  # the zombie's second entry realigns behind the fence, then the new owner's second entry behind it
    before=1,
    steps=["old-send", "old-send", "fence", "old-arrive", "old-arrive", "new-send", "new-send", "new-arrive",
           "new-arrive"],
)  # fmt: skip
def test_fencing_model_never_loses_an_acknowledged_entry(before: int, steps: list[str]) -> None:
    stream = Stream()
    old = Owner(epoch=1)
    old.fence_seq = old.last_seq = stream.store_fence(1)
    for _ in range(before):  # acknowledged before the race
        send(old)
        stream.deliver(old)
    new = Owner(epoch=2)
    for step in steps:
        if step == "fence" and new.fence_seq == 0:
            new.fence_seq = new.last_seq = stream.store_fence(2)
        elif step == "old-send":
            send(old)
        elif step == "old-arrive" and old.in_flight:
            stream.deliver(old)
        elif step == "new-send":
            send(new)
        elif step == "new-arrive" and new.in_flight:
            stream.deliver(new)
    read = accepted(stream.records)
    for owner in (old, new):
        mine = [index for epoch, index in read if epoch == owner.epoch]
        assert mine == list(range(len(mine))), "an owner's entries are a prefix of its call order"
        assert set(owner.acknowledged) <= set(mine), "every acknowledged entry is read"
    epochs = [epoch for epoch, _ in read]
    assert epochs == sorted(epochs), "the older owner's entries come first"
    if new.fence_seq:
        fenced_at = new.fence_seq
        late = [r for r in stream.records if r.sequence > fenced_at and r.epoch == 1 and r.kind == KIND_DATA]
        assert not set(r.index for r in late) & set(old.acknowledged), "nothing stored after the fence was acked"
