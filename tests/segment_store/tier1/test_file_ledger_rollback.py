"""Rollback detection of the file ledger log: a ledger file that comes back shorter than what the metadata
records as acknowledged is refused with ``DataLogCorruptedError``; normal restarts are not.

Files are real (under tmp_path), the coordination store is the in-process one. A kill -9 is stood for by a
log that is never closed and a torn tail (bytes of a group that never completed); the process-level version is
``tests/segment_store/containers/test_tier1_rollback_kill.py``. Also the metadata records of both Tier-1 logs
(pure: JSON in, JSON out), read with and without the new ``acknowledged`` field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ledger_helpers import append_each, make_config, open_log, read_all, run

from segment_store.tier1.file.ledger_file import ENTRY_HEADER, FILE_HEADER, ledger_file_name
from segment_store.tier1.jetstream.metadata import JetStreamLogMetadata
from segment_store.tier1.log import DataLogCorruptedError, LogAddress
from segment_store.tier1.log_metadata import LogMetadata
from segstore_shared.coordination.memory_store import MemoryCoordinationServer

pytestmark = pytest.mark.unit
SIZE = 100
ENTRY_BYTES = ENTRY_HEADER.size + SIZE


def cut_after(path: Path, entries: int) -> None:
    """Truncate a ledger file of SIZE-byte entries to its header and its first ``entries`` entries."""
    os.truncate(path, FILE_HEADER.size + entries * ENTRY_BYTES)


def tear(path: Path) -> None:
    """Append the first bytes of an entry that never completed (a kill -9 during a write)."""
    with open(path, "ab") as file:
        file.write(ENTRY_HEADER.pack(SIZE, 0, 0, 0)[:9])


def test_initialize_with_open_ledger_truncated_below_the_mark_is_refused(tmp_path: Path) -> None:
    async def body() -> None:
        config = make_config(tmp_path, ownership_lease_s=0)
        store = MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 10, SIZE)
        await log.truncate(written[2].address)  # records entry 9 (the last acknowledged) as acknowledged
        assert log.metadata.acknowledged == (written[9].address.ledger_id, 9)
        await append_each(log, 5, SIZE)  # 10..14: after the mark
        await log.close()  # the ledger stays open, as after a crash
        ledger = written[0].address.ledger_id
        path = tmp_path / "log" / ledger_file_name(ledger, 1)
        cut_after(path, 6)  # entries 0..5 left: the file lost acknowledged entries 6..9 (and 10..14)

        again = await open_log_expecting_corruption(config, store)
        message = str(again)
        assert "log log:" in message and path.name in message
        assert "ends at entry 5" in message and "entry 9 of ledger" in message
        assert "truncated or replaced" in message

    run(body)


async def open_log_expecting_corruption(config: object, store: object) -> DataLogCorruptedError:
    with pytest.raises(DataLogCorruptedError) as caught:
        await open_log(config, store)  # type: ignore[arg-type]
    return caught.value


def test_initialize_again_after_a_refusal_is_still_refused(tmp_path: Path) -> None:
    """The mark survives the refused owner's epoch bump: the log stays offline until an operator acts."""

    async def body() -> None:
        config = make_config(tmp_path, ownership_lease_s=0)
        store = MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 8, SIZE)
        await log.truncate(written[0].address)
        await log.close()
        cut_after(tmp_path / "log" / ledger_file_name(written[0].address.ledger_id, 1), 3)
        for _ in range(2):
            error = await open_log_expecting_corruption(config, store)
            assert "ends at entry 2, but entry 7" in str(error)

    run(body)


def test_read_of_closed_ledger_truncated_names_the_log(tmp_path: Path) -> None:
    """A ledger closed by roll-over (its end recorded) and then cut short: recovery refuses it."""

    async def body() -> None:
        config = make_config(
            tmp_path, ownership_lease_s=0, rollover_size_bytes=4 * ENTRY_BYTES, max_append_length_bytes=SIZE
        )
        store = MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 12, SIZE)
        await log.close()
        first = written[0].address.ledger_id
        closed = log.metadata.ledger(first)
        assert closed is not None and closed.last_entry is not None and closed.last_entry >= 3
        cut_after(tmp_path / "log" / ledger_file_name(first, 1), 2)

        again = await open_log(config, store)
        with pytest.raises(DataLogCorruptedError, match=rf"log log: ledger {ledger_file_name(first, 1)}: entry 2"):
            await read_all(again)
        await again.close()

    run(body)


def test_restarts_with_torn_tail_and_truncations_are_not_refused(tmp_path: Path) -> None:
    """Clean closes, crashes (never closed, a torn group after the last entry) and truncations in between:
    every restart recovers every acknowledged entry; none is refused."""

    async def body() -> None:
        config = make_config(
            tmp_path, ownership_lease_s=0, rollover_size_bytes=6 * ENTRY_BYTES, max_append_length_bytes=SIZE
        )
        store = MemoryCoordinationServer().connect()
        expected: list[bytes] = []
        truncated_at: LogAddress | None = None
        for round_number in range(6):
            log = await open_log(config, store)
            recovered = await read_all(log)
            assert [item.payload for item in recovered] == expected
            written = await append_each(log, 7, SIZE)
            expected += [item.payload for item in written]
            if round_number % 2 == 0:
                truncated_at = written[3].address
                await log.truncate(truncated_at)
                expected = [item.payload for item in written[4:]]
            await log.close()  # ownership is kept: the next owner recovers as after a crash
            if round_number % 3 == 1:  # killed mid-group: bytes of a group never synced nor acknowledged
                ledger = log.metadata.ledgers[-1]
                tear(tmp_path / "log" / ledger_file_name(ledger.ledger_id, ledger.epoch))
        assert truncated_at is not None
        final = await open_log(config, store)
        assert [item.payload for item in await read_all(final)] == expected
        assert final.metadata.acknowledged is not None
        await final.close()

    run(body)


def test_ledger_metadata_without_acknowledged_parses_as_unknown() -> None:
    record = LogMetadata.new("owner-a")
    document = json.loads(record.serialize())
    assert "acknowledged" not in document  # an older reader sees the same document as before
    assert LogMetadata.parse(record.serialize()).acknowledged is None
    marked = record.acknowledged_up_to(LogAddress(3, 7, 1))
    assert LogMetadata.parse(marked.serialize()) == marked
    assert marked.acknowledged_up_to(LogAddress(3, 6, 1)) is marked  # the mark only moves forward
    assert marked.fenced_by("owner-b").acknowledged == (3, 7)


def test_jetstream_metadata_without_acknowledged_parses_as_unknown() -> None:
    old = b'{"epoch":4,"format":"jetstream-1","owner":"o","truncation":[5,2,3]}'  # written by an older version
    parsed = JetStreamLogMetadata.parse(old)
    assert parsed.acknowledged is None and parsed.truncation == LogAddress(5, 2, 3)
    assert parsed.serialize() == old
    marked = parsed.acknowledged_up_to(9)
    assert JetStreamLogMetadata.parse(marked.serialize()) == marked
    assert marked.acknowledged_up_to(8) is marked
    assert marked.fenced_by("p").acknowledged == 9
    with pytest.raises(DataLogCorruptedError, match="unreadable"):
        JetStreamLogMetadata.parse(old.replace(b'"epoch"', b'"acknowledged":"x","epoch"'))
