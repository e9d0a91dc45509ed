"""The self-tester's oracle and event format: every kind of violation is caught, and a clean history has none."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segstore_cli.selftest.checker import Checker, Counts, TxnOutcome
from segstore_cli.selftest.events import CorruptEvent, EventId, decode, encode

pytestmark = pytest.mark.unit


def plain(seq: int, key: str = "k1", source: str = "w0.1") -> EventId:
    return EventId("P", source, key, seq)


def violations(checker: Checker) -> dict[str, int]:
    return {name: getattr(checker.counts, name) for name in Counts.VIOLATIONS if getattr(checker.counts, name)}


@given(st.sampled_from("PT"), st.text("abc0123.", min_size=1, max_size=12), st.integers(1, 10**9))
def test_events_round_trip(kind: str, source: str, seq: int) -> None:
    event = EventId(kind, source, "key-7", seq)
    assert decode(encode(event)) == event


@given(st.data())
def test_any_change_to_an_event_is_caught(data: st.DataObject) -> None:
    raw = bytearray(encode(plain(data.draw(st.integers(1, 10**6)))))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptEvent):
        decode(bytes(raw))


def test_events_cut_short_or_extended_are_corrupt() -> None:
    raw = encode(plain(5))
    for bad in (raw[:-1], raw + b"x", raw[: len(raw) // 2]):
        with pytest.raises(CorruptEvent):
            decode(bad)


def test_a_clean_history_has_no_violation() -> None:
    checker = Checker()
    events = [plain(n) for n in range(1, 6)] + [plain(n, key="k2") for n in range(1, 4)]
    for event in events:
        checker.acked(event, at=1.0)
    checker.verified([encode(e) for e in events[:4]], through=0.5)
    checker.verified([encode(e) for e in events[4:]], through=2.0)
    assert violations(checker) == {}
    assert checker.counts.acked == checker.counts.read == 8


def test_an_acknowledged_event_missing_after_a_later_cut_is_lost() -> None:
    checker = Checker()
    checker.acked(plain(1), at=1.0)
    checker.acked(plain(2), at=3.0)
    checker.verified([], through=2.0)  # the cut was taken after 1's ack, before 2's
    assert violations(checker) == {"lost": 1}
    checker.verified([encode(plain(2))], through=4.0)
    assert violations(checker) == {"lost": 1}


def test_an_event_a_stale_cut_left_out_and_a_later_round_read_is_late_not_lost() -> None:
    """Acknowledged before the round's tail cut was asked for, yet beyond it (a stale cut): counted lost by that
    round, then late once a later round reads it: nothing was lost, the cut was wrong."""
    checker = Checker()
    checker.acked(plain(1), at=1.0)
    checker.verified([], through=2.0, cut="{0.#epoch.0: 1200}")
    assert violations(checker) == {"lost": 1}
    checker.verified([encode(plain(1))], through=3.0)
    assert violations(checker) == {"late": 1}
    assert len(checker.examples) == 1, checker.examples  # the lost example was replaced
    assert checker.examples[-1] == (
        f"late: {plain(1)} was acknowledged before the tail cut {{0.#epoch.0: 1200}} was taken, but is after it"
    )


def test_an_event_read_before_its_acknowledgement_is_not_lost() -> None:
    checker = Checker()
    checker.verified([encode(plain(1))], through=1.0)
    checker.acked(plain(1), at=2.0)
    checker.verified([], through=3.0)
    assert violations(checker) == {}


def test_duplicates_and_reorders_per_key_are_caught() -> None:
    checker = Checker()
    checker.verified([encode(plain(1)), encode(plain(2)), encode(plain(2))], through=None)
    assert violations(checker) == {"duplicated": 1}
    checker.verified([encode(plain(4)), encode(plain(3))], through=None)
    assert violations(checker) == {"duplicated": 1, "reordered": 1}
    checker.verified([encode(plain(1, key="k2")), encode(plain(1, source="w0.2"))], through=None)
    assert violations(checker) == {"duplicated": 1, "reordered": 1}  # other keys and writers count on their own


def test_unacknowledged_events_may_be_missing() -> None:
    checker = Checker()
    checker.acked(plain(2), at=1.0)
    checker.verified([encode(plain(2))], through=5.0)  # 1 was written, never acknowledged, and is not there
    assert violations(checker) == {}


def test_corrupt_bytes_and_phantom_transactions_are_corrupt() -> None:
    checker = Checker()
    checker.verified([b"garbage", encode(EventId("T", "nobody", "k1", 1))], through=None)
    assert violations(checker) == {"corrupted": 2}


def test_transactions_committed_whole_aborted_invisible_unknown_all_or_nothing() -> None:
    checker = Checker()
    for txn in ("committed", "aborted", "unknown-all", "unknown-none"):
        checker.txn_begun(txn, {"k1": 2, "k2": 1})
    whole = [EventId("T", "committed", "k1", 1), EventId("T", "committed", "k1", 2), EventId("T", "committed", "k2", 1)]
    checker.txn_ended("committed", TxnOutcome.COMMITTED)
    checker.txn_ended("aborted", TxnOutcome.ABORTED)
    checker.txn_ended("unknown-all", TxnOutcome.UNKNOWN)
    checker.txn_ended("unknown-none", TxnOutcome.UNKNOWN)
    unknown_all = [EventId("T", "unknown-all", e.key, e.seq) for e in whole]
    checker.verified([encode(e) for e in whole + unknown_all], through=None)
    checker.finish()
    assert violations(checker) == {}


def test_a_partial_or_aborted_transaction_is_caught() -> None:
    checker = Checker()
    checker.txn_begun("t1", {"k1": 2})
    checker.txn_begun("t2", {"k1": 1})
    checker.txn_begun("t3", {"k1": 2})
    checker.txn_ended("t1", TxnOutcome.COMMITTED)
    checker.txn_ended("t3", TxnOutcome.UNKNOWN)
    checker.verified([encode(EventId("T", "t1", "k1", 1)), encode(EventId("T", "t2", "k1", 1))], through=None)
    checker.verified([encode(EventId("T", "t3", "k1", 2))], through=None)
    checker.txn_ended("t2", TxnOutcome.ABORTED)  # its event was read before the abort was known
    checker.finish()
    assert violations(checker) == {"aborted_visible": 1, "partial_txns": 2}
    assert len(checker.examples) == 3
