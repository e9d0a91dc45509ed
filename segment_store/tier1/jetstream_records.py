"""The records a JetStream Tier-1 log stores, and which of them are entries of the log.

Every message of a log's JetStream stream is one record, described by headers:

- ``Segstore-Kind: fence``, ``Segstore-Epoch: e``: the owner of epoch ``e`` took the log
  over here (empty body);
- ``Segstore-Kind: data``, ``Segstore-Epoch: e``, ``Segstore-Index: i``: the ``i``-th
  entry (0, 1, 2, ...) the owner of epoch ``e`` appended; the body is the entry.

Data records are published with ``Nats-Expected-Last-Sequence`` set to the sequence of
the owner's previous record (its fence for index 0), so an owner's acknowledged records
form one unbroken run right after its fence. Three kinds of stored record are *not*
entries, and :class:`RecordFilter` drops them (see :mod:`.jetstream_log` for why each
can exist and why nothing acknowledged is among them):

- a data record of an epoch lower than the highest fence before it (a fenced zombie's
  pipelined record that realigned with the stream after the fence took its place);
- a data record whose index does not follow the previous accepted record of its epoch,
  and every later record of that epoch (the owner's run broke there: the owner failed
  at the break and acknowledged nothing after it);
- a fence of an epoch not above the highest fence seen (an owner that lost the race).

A log address is ``LogAddress(ledger_id=<stream sequence>, entry_id=<index>, epoch=e)``:
ordered by stream sequence, so by log order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from segment_store.tier1.log import MAX_ENTRY_ID, DataLogCorruptedError, LogAddress

KIND = "Segstore-Kind"
EPOCH = "Segstore-Epoch"
INDEX = "Segstore-Index"
EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"
KIND_DATA = "data"
KIND_FENCE = "fence"
HEADER_ROOM = 1024
"""Bytes a record's headers may take on top of its body (NATS counts headers in ``max_payload``)."""


def data_headers(epoch: int, index: int, expected_last_sequence: int) -> dict[str, str]:
    """Headers of the ``index``-th data record of ``epoch``, stored only right after ``expected_last_sequence``."""
    return {
        KIND: KIND_DATA,
        EPOCH: str(epoch),
        INDEX: str(index),
        EXPECTED_LAST_SEQUENCE: str(expected_last_sequence),
    }


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
    payload: bytes

    @property
    def address(self) -> LogAddress:
        return LogAddress(ledger_id=self.sequence, entry_id=self.index, epoch=self.epoch)


def parse_record(sequence: int, headers: Mapping[str, str] | None, payload: bytes) -> Record:
    """Decode a stored message; raises :class:`DataLogCorruptedError` when it is not a Tier-1 record."""
    try:
        if headers is None:
            raise ValueError("no headers")
        kind = headers[KIND]
        epoch = int(headers[EPOCH])
        if kind == KIND_DATA:
            index = int(headers[INDEX])
        elif kind == KIND_FENCE:
            index = 0
        else:
            raise ValueError(f"unknown kind {kind!r}")
        if epoch < 1 or not 0 <= index <= MAX_ENTRY_ID:
            raise ValueError(f"epoch {epoch} / index {index} out of range")
    except (KeyError, ValueError) as exc:
        raise DataLogCorruptedError(f"message {sequence} is not a segstore Tier-1 record: {exc}") from exc
    return Record(sequence, kind, epoch, index, payload)


class RecordFilter:
    """Feeds on records in stream order and says which are entries of the log (module docstring).

    ``start`` is the truncation point (the last discarded entry) when reading begins right
    after it: its epoch is the highest fence before it, and its index the last accepted one
    of that epoch. None: reading starts at the stream's first record.
    """

    def __init__(self, start: LogAddress | None = None) -> None:
        self.floor = 0 if start is None else start.epoch
        self._next_index = 0 if start is None else start.entry_id + 1
        self._broken = False

    def accept(self, record: Record) -> bool:
        """Whether ``record`` is an entry; raises :class:`DataLogCorruptedError` for data without its fence."""
        if record.kind == KIND_FENCE:
            if record.epoch > self.floor:
                self.floor, self._next_index, self._broken = record.epoch, 0, False
            return False
        if record.epoch < self.floor or self._broken:
            return False
        if record.epoch > self.floor:
            raise DataLogCorruptedError(
                f"message {record.sequence}: data of epoch {record.epoch} without a fence (highest fence {self.floor})"
            )
        if record.index != self._next_index:
            self._broken = True
            return False
        self._next_index += 1
        return True
