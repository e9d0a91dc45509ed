"""The metadata record of a file ledger log, kept in the coordination store.

One node per log holds a JSON document: the epoch and the owner that acquired it, the
ordered ledger list, the next ledger id, the truncation address, and ``acknowledged``:
the address of an entry the owner had acknowledged when it last truncated (the rollback
check of :mod:`segment_store.tier1.file.ledger_log`; absent in older records: unknown).
It changes only by versioned compare-and-set (see
:mod:`segment_store.tier1.file.ledger_log`); this module only builds and checks new
values, it does no I/O.

A ledger record is *open* (``last_entry is None``: being written by the owner of
``epoch``, its end unknown) or *closed at* ``last_entry`` (-1 for an empty ledger).
Readers never read a closed ledger past ``last_entry``. Invariants, checked on every
construction: ledger ids strictly increase and stay below ``next_ledger_id``; only the
last ledger may be open; epochs of ledgers never exceed the log's epoch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from segment_store.tier1.log import DataLogCorruptedError, LogAddress
from segment_store.tier1.owner_identity import owner_is_gone

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One ledger of the log: its id, the epoch that created it, and its end if closed; who created it and the
    ownership lease it acknowledged under (None/0 in records written before they were kept)."""

    ledger_id: int
    epoch: int
    last_entry: int | None = None
    owner: str | None = None
    lease_ms: int = 0

    @property
    def is_open(self) -> bool:
        return self.last_entry is None

    def closed_at(self, last_entry: int) -> LedgerRecord:
        return replace(self, last_entry=last_entry)


@dataclass(frozen=True, slots=True)
class LogMetadata:
    """The whole metadata record of one log (immutable; methods return new values)."""

    epoch: int
    owner: str
    ledgers: tuple[LedgerRecord, ...]
    next_ledger_id: int
    truncation: tuple[int, int] | None = None  # (ledger_id, entry_id) of the last discarded entry
    lease_ms: int = 0  # the owner's ownership lease (see file_ledger_log); absent in older records: 0
    acknowledged: tuple[int, int] | None = None
    """(ledger_id, entry_id) of an entry acknowledged (synced) by the time of the last truncation: its ledger
    file must still hold it. None: unknown (no check)."""

    def __post_init__(self) -> None:
        previous = 0
        for index, ledger in enumerate(self.ledgers):
            if ledger.ledger_id <= previous:
                raise ValueError(f"ledger ids must increase: {ledger.ledger_id} after {previous}")
            if ledger.is_open and index != len(self.ledgers) - 1:
                raise ValueError(f"only the last ledger may be open, {ledger.ledger_id} is not last")
            if ledger.epoch > self.epoch:
                raise ValueError(f"ledger {ledger.ledger_id} has epoch {ledger.epoch} > log epoch {self.epoch}")
            previous = ledger.ledger_id
        if self.next_ledger_id <= previous:
            raise ValueError(f"next_ledger_id {self.next_ledger_id} is not above ledger {previous}")
        if self.lease_ms < 0:
            raise ValueError(f"lease_ms must be >= 0, not {self.lease_ms}")

    @classmethod
    def new(cls, owner: str, lease_ms: int = 0) -> LogMetadata:
        """The record of a log that has never been written: epoch 1, no ledgers."""
        return cls(epoch=1, owner=owner, ledgers=(), next_ledger_id=1, lease_ms=lease_ms)

    def fenced_by(self, owner: str, lease_ms: int = 0) -> LogMetadata:
        """The same log acquired by ``owner`` (with its lease) at the next epoch."""
        return replace(self, epoch=self.epoch + 1, owner=owner, lease_ms=lease_ms)

    def ledger(self, ledger_id: int) -> LedgerRecord | None:
        for ledger in self.ledgers:
            if ledger.ledger_id == ledger_id:
                return ledger
        return None

    def with_ledger_closed(self, ledger_id: int, last_entry: int) -> LogMetadata:
        """Close the (open) ledger ``ledger_id`` after ``last_entry``."""
        if last_entry < -1:
            raise ValueError(f"last_entry must be >= -1, got {last_entry}")
        ledgers = tuple(
            ledger.closed_at(last_entry) if ledger.ledger_id == ledger_id else ledger for ledger in self.ledgers
        )
        return replace(self, ledgers=ledgers)

    def with_new_ledger(self) -> tuple[LogMetadata, LedgerRecord]:
        """Append an open ledger created by the current epoch's owner (with its lease); returns it too."""
        record = LedgerRecord(self.next_ledger_id, self.epoch, None, self.owner, self.lease_ms)
        updated = replace(self, ledgers=(*self.ledgers, record), next_ledger_id=self.next_ledger_id + 1)
        return updated, record

    def without_empty_ledgers(self) -> tuple[LogMetadata, list[LedgerRecord]]:
        """Drop closed ledgers that hold no entry; returns the dropped ones too."""
        kept = tuple(ledger for ledger in self.ledgers if ledger.last_entry != -1)
        dropped = [ledger for ledger in self.ledgers if ledger.last_entry == -1]
        return replace(self, ledgers=kept), dropped

    def truncated(self, upto: LogAddress) -> tuple[LogMetadata, list[LedgerRecord]]:
        """Discard everything at or before ``upto``; returns the ledgers now wholly discarded.

        The truncation point only moves forward; open ledgers are never dropped.
        """
        point = (upto.ledger_id, upto.entry_id)
        if self.truncation is not None and point <= self.truncation:
            return self, []
        kept: list[LedgerRecord] = []
        dropped: list[LedgerRecord] = []
        for ledger in self.ledgers:
            last = ledger.last_entry
            if last is not None and (ledger.ledger_id, last) <= point:
                dropped.append(ledger)
            else:
                kept.append(ledger)
        return replace(self, ledgers=tuple(kept), truncation=point), dropped

    def acknowledged_up_to(self, address: LogAddress) -> LogMetadata:
        """Record that the entry at ``address`` was acknowledged (the mark only moves forward)."""
        point = (address.ledger_id, address.entry_id)
        if self.acknowledged is not None and point <= self.acknowledged:
            return self
        return replace(self, acknowledged=point)

    def truncation_address(self) -> tuple[int, int]:
        """The truncation point, ``(0, 0)`` ordering before every real entry when none."""
        return self.truncation if self.truncation is not None else (0, 0)

    def last_closed_address(self) -> LogAddress | None:
        """The address of the last entry of the last non-empty closed ledger, if any."""
        for ledger in reversed(self.ledgers):
            if ledger.last_entry is not None and ledger.last_entry >= 0:
                return LogAddress(ledger_id=ledger.ledger_id, entry_id=ledger.last_entry, epoch=ledger.epoch)
        return None

    def serialize(self) -> bytes:
        document = {
            "format": FORMAT_VERSION,
            "epoch": self.epoch,
            "owner": self.owner,
            "next_ledger_id": self.next_ledger_id,
            "truncation": list(self.truncation) if self.truncation is not None else None,
            "ledgers": [_ledger_document(ledger) for ledger in self.ledgers],
        }
        if self.lease_ms:
            document["lease_ms"] = self.lease_ms
        if self.acknowledged is not None:
            document["acknowledged"] = list(self.acknowledged)
        return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> LogMetadata:
        """Decode :meth:`serialize` output; raises :class:`DataLogCorruptedError` otherwise."""
        try:
            document = json.loads(data)
            if document.get("format") != FORMAT_VERSION:
                raise ValueError(f"unknown metadata format {document.get('format')!r}")
            truncation = document["truncation"]
            acknowledged = document.get("acknowledged")
            return cls(
                epoch=int(document["epoch"]),
                owner=str(document["owner"]),
                next_ledger_id=int(document["next_ledger_id"]),
                truncation=(int(truncation[0]), int(truncation[1])) if truncation is not None else None,
                ledgers=tuple(_parse_ledger(item) for item in document["ledgers"]),
                lease_ms=int(document.get("lease_ms", 0)),
                acknowledged=(int(acknowledged[0]), int(acknowledged[1])) if acknowledged is not None else None,
            )
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise DataLogCorruptedError(f"unreadable log metadata: {exc}") from exc


def _ledger_document(ledger: LedgerRecord) -> list[object]:
    fields: list[object] = [ledger.ledger_id, ledger.epoch, ledger.last_entry]
    if ledger.owner is not None:
        fields += [ledger.owner, ledger.lease_ms]
    return fields


def _parse_ledger(item: list[Any]) -> LedgerRecord:
    ledger_id, epoch, last = item[:3]
    owner = str(item[3]) if len(item) > 3 else None
    lease_ms = int(item[4]) if len(item) > 4 else 0
    return LedgerRecord(int(ledger_id), int(epoch), None if last is None else int(last), owner, lease_ms)


def lease_to_wait(previous: LogMetadata) -> int:
    """How long (ms) a new owner must wait after its fence before it reads the open ledgers of ``previous``
    (the record it replaced): the longest lease among the owners of those ledgers that may still be alive.

    Each open ledger names the owner that created it and the lease it acknowledges under, so an owner fenced
    by someone who died before recovering its ledger (or who ran with no lease) is still waited for. A ledger
    from an older record names no owner: then the record's owner and lease stand for it."""
    wait = 0
    for ledger in previous.ledgers:
        if not ledger.is_open:
            continue
        owner, lease = (
            (ledger.owner, ledger.lease_ms) if ledger.owner is not None else (previous.owner, previous.lease_ms)
        )
        if lease > 0 and not owner_is_gone(owner):
            wait = max(wait, lease)
    return wait
