"""FrameCork: frames of one turn leave together, in order, once; big queues leave at once; drop forgets."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from segment_store.protocol.cork import FrameCork

pytestmark = pytest.mark.unit


class Turns:
    """A fake event loop: ``call_soon`` callbacks run when the test ends the turn."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.soon.append(callback)

    def end_turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


def test_frames_of_one_turn_leave_in_one_write_in_order() -> None:
    turns, sent = Turns(), []
    cork = FrameCork(sent.append, turns.call_soon, limit=100)
    for frame in (b"a", b"bb", b"ccc"):
        cork.write(frame)
    assert sent == [] and len(turns.soon) == 1 and cork.queued_bytes == 6
    turns.end_turn()
    assert sent == [b"abbccc"] and cork.queued_bytes == 0
    cork.write(b"d")
    turns.end_turn()
    turns.end_turn()
    assert sent == [b"abbccc", b"d"]


def test_a_queue_at_the_limit_leaves_at_once_and_the_scheduled_flush_finds_nothing() -> None:
    turns, sent = Turns(), []
    cork = FrameCork(sent.append, turns.call_soon, limit=10)
    cork.write(b"12345")
    cork.write(b"67890")
    assert sent == [b"1234567890"]
    cork.write(b"x")
    turns.end_turn()  # two flushes were scheduled: the first sends "x", the second finds nothing
    assert sent == [b"1234567890", b"x"]


def test_flush_sends_now_and_drop_forgets() -> None:
    turns, sent = Turns(), []
    cork = FrameCork(sent.append, turns.call_soon, limit=100)
    cork.write(b"kept")
    cork.flush()
    cork.write(b"lost")
    cork.drop()
    turns.end_turn()
    assert sent == [b"kept"] and cork.queued_bytes == 0


def test_a_frame_given_in_pieces_leaves_joined_in_its_place() -> None:
    turns, sent = Turns(), []
    cork = FrameCork(sent.append, turns.call_soon, limit=100)
    cork.write_parts(b"<", [b"a", b"bc"], b">", 5)
    cork.write(b"|")
    cork.write_parts(b"[", [], b"]", 2)
    assert sent == [] and len(turns.soon) == 1 and cork.queued_bytes == 8
    turns.end_turn()
    assert sent == [b"<abc>|[]"]


def test_pieces_that_reach_the_limit_leave_at_once_with_what_was_queued() -> None:
    turns, sent = Turns(), []
    cork = FrameCork(sent.append, turns.call_soon, limit=10)
    cork.write(b"12")
    cork.write_parts(b"<", [b"3456", b"789"], b">", 9)
    assert sent == [b"12<3456789>"] and cork.queued_bytes == 0
    turns.end_turn()
    assert sent == [b"12<3456789>"]
