"""The records a JetStream Tier-1 log stores, and which of their entries are entries of the log.

Every message of a log's JetStream stream is one record, described by headers:

- ``Segstore-Kind: fence``, ``Segstore-Epoch: e``: the owner of epoch ``e`` took the log
  over here (empty body);
- ``Segstore-Kind: data``, ``Segstore-Epoch: e``, ``Segstore-Index: i`` and, for a group,
  ``Segstore-Count: n``: entries ``i .. i+n-1`` (counted 0, 1, 2, ... per epoch) that the
  owner of epoch ``e`` appended. The body is the entry itself when ``n`` is 1 (no count
  header), else ``n`` times a 4-byte big-endian length and the entry (group commit: the
  appends queued while the previous record was being published go out as one record).

Data records are published with ``Nats-Expected-Last-Sequence`` set to the sequence of
the owner's previous record (its fence for the first), so an owner's acknowledged records
form one unbroken run right after its fence. Three kinds of stored record hold *no*
entries of the log, and :class:`RecordFilter` drops them (see :mod:`.jetstream_log` for
why each can exist and why nothing acknowledged is among them):

- a data record of an epoch lower than the highest fence before it (a fenced zombie's
  pipelined record that realigned with the stream after the fence took its place);
- a data record whose first index does not follow the previous accepted record of its
  epoch, and every later record of that epoch (the owner's run broke there: the owner
  failed at the break and acknowledged nothing after it);
- a fence of an epoch not above the highest fence seen (an owner that lost the race).

A log address is ``LogAddress(ledger_id=<stream sequence>, entry_id=<index>, epoch=e)``:
ordered by stream sequence, then index, so by log order.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from segment_store.tier1.log import MAX_ENTRY_ID, DataLogCorruptedError, LogAddress

KIND = "Segstore-Kind"
EPOCH = "Segstore-Epoch"
INDEX = "Segstore-Index"
COUNT = "Segstore-Count"
EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"
KIND_DATA = "data"
KIND_FENCE = "fence"
HEADER_ROOM = 1024
"""Bytes a record's headers may take on top of its body (NATS counts headers in ``max_payload``)."""
_LENGTH = struct.Struct(">I")
LENGTH_BYTES = _LENGTH.size
"""What a group record adds to each entry: its length."""


def data_headers(epoch: int, index: int, expected_last_sequence: int, count: int = 1) -> dict[str, str]:
    """Headers of the data record of entries ``index .. index+count-1`` of ``epoch``, stored only right after
    ``expected_last_sequence``."""
    headers = {
        KIND: KIND_DATA,
        EPOCH: str(epoch),
        INDEX: str(index),
        EXPECTED_LAST_SEQUENCE: str(expected_last_sequence),
    }
    if count != 1:
        headers[COUNT] = str(count)
    return headers


def group_body(entries: Sequence[bytes]) -> bytes:
    """The body of a data record holding ``entries`` (see the module docstring)."""
    if len(entries) == 1:
        return entries[0]
    parts: list[bytes] = []
    for entry in entries:
        parts.append(_LENGTH.pack(len(entry)))
        parts.append(entry)
    return b"".join(parts)


def fence_headers(epoch: int) -> dict[str, str]:
    """Headers of the fence record of ``epoch``."""
    return {KIND: KIND_FENCE, EPOCH: str(epoch)}


@dataclass(frozen=True, slots=True)
class Record:
    """One stored message, decoded."""

    sequence: int
    kind: str
    epoch: int
    index: int
    """The first entry's index (0 for a fence)."""
    count: int
    """Entries in the record (0 for a fence)."""
    body: bytes

    def entries(self) -> list[tuple[LogAddress, bytes]]:
        """The record's entries with their addresses; raises :class:`DataLogCorruptedError` for a bad group."""
        if self.count == 1:
            return [(LogAddress(self.sequence, self.index, self.epoch), self.body)]
        found: list[tuple[LogAddress, bytes]] = []
        body, position = memoryview(self.body), 0
        for offset in range(self.count):
            if position + LENGTH_BYTES > len(body):
                break
            (length,) = _LENGTH.unpack_from(body, position)
            position += LENGTH_BYTES
            if position + length > len(body):
                break
            found.append(
                (LogAddress(self.sequence, self.index + offset, self.epoch), bytes(body[position : position + length]))
            )
            position += length
        if len(found) != self.count or position != len(body):
            raise DataLogCorruptedError(f"message {self.sequence}: a group of {self.count} entries that does not parse")
        return found


def parse_record(sequence: int, headers: Mapping[str, str] | None, payload: bytes) -> Record:
    """Decode a stored message; raises :class:`DataLogCorruptedError` when it is not a Tier-1 record."""
    try:
        if headers is None:
            raise ValueError("no headers")
        kind = headers[KIND]
        epoch = int(headers[EPOCH])
        if kind == KIND_DATA:
            index, count = int(headers[INDEX]), int(headers.get(COUNT, "1"))
        elif kind == KIND_FENCE:
            index, count = 0, 0
        else:
            raise ValueError(f"unknown kind {kind!r}")
        if epoch < 1 or not 0 <= index <= MAX_ENTRY_ID or (kind == KIND_DATA and count < 1):
            raise ValueError(f"epoch {epoch} / index {index} / count {count} out of range")
    except (KeyError, ValueError) as exc:
        raise DataLogCorruptedError(f"message {sequence} is not a segstore Tier-1 record: {exc}") from exc
    return Record(sequence, kind, epoch, index, count, payload)


class RecordFilter:
    """Feeds on records in stream order and says which of their entries are entries of the log (module docstring).

    ``start`` is the truncation point (the last discarded entry) when reading begins at the
    record holding it: its epoch is the highest fence before it, and its index the last
    accepted one of that epoch; that record's entries up to ``start`` are dropped. None:
    reading starts at the stream's first record.
    """

    def __init__(self, start: LogAddress | None = None) -> None:
        self.floor = 0 if start is None else start.epoch
        self._next_index = 0 if start is None else start.entry_id + 1
        self._start = start
        self._broken = False

    def accept(self, record: Record) -> list[tuple[LogAddress, bytes]]:
        """The entries of ``record`` that belong to the log (often all, often none); raises
        :class:`DataLogCorruptedError` for data without its fence or a group that does not parse."""
        if record.kind == KIND_FENCE:
            if record.epoch > self.floor:
                self.floor, self._next_index, self._broken = record.epoch, 0, False
            return []
        if record.epoch < self.floor or self._broken:
            return []
        if record.epoch > self.floor:
            raise DataLogCorruptedError(
                f"message {record.sequence}: data of epoch {record.epoch} without a fence (highest fence {self.floor})"
            )
        skip = 0
        start = self._start
        if start is not None and record.sequence == start.ledger_id and record.epoch == start.epoch:
            skip = self._next_index - record.index  # the record holding the truncation point: drop its entries up to it
            if not 0 < skip <= record.count:
                self._broken = True
                return []
        elif record.index != self._next_index:
            self._broken = True
            return []
        self._next_index = record.index + record.count
        return record.entries()[skip:]
