"""The metadata record of a JetStream Tier-1 log, kept in the coordination store.

One node per log holds a JSON document: the epoch and the owner that acquired it, the
truncation point (the address of the last discarded entry: stream sequence, index,
epoch), and ``acknowledged``: a stream sequence JetStream has acknowledged, so the stream
must still reach it (the rollback check of :mod:`.log`; absent in records written before
it was kept: unknown, no check). It changes only by versioned compare-and-set (through
:class:`~segment_store.tier1.metadata_keeper.MetadataKeeper`); this module does no I/O.
The records themselves live in the log's JetStream stream (:mod:`.jetstream_log`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from segment_store.tier1.log import DataLogCorruptedError, LogAddress

FORMAT = "jetstream-1"


@dataclass(frozen=True, slots=True)
class JetStreamLogMetadata:
    """Who owns the log at which epoch, and where it is truncated (immutable)."""

    epoch: int
    owner: str
    truncation: LogAddress | None = None
    acknowledged: int | None = None
    """A stream sequence JetStream acknowledged (the latest owner's fence, or the record of an entry it had
    acknowledged when it last truncated): the stream must still end at or after it. None: unknown."""

    def __post_init__(self) -> None:
        if self.epoch < 1:
            raise ValueError(f"epoch must be >= 1, not {self.epoch}")
        if self.truncation is not None and self.truncation.epoch > self.epoch:
            raise ValueError(f"truncation {self.truncation} is from a later epoch than {self.epoch}")
        if self.acknowledged is not None and self.acknowledged < 1:
            raise ValueError(f"acknowledged sequence must be >= 1, not {self.acknowledged}")

    @classmethod
    def new(cls, owner: str, lease_ms: int = 0) -> JetStreamLogMetadata:
        """The record of a log never written: epoch 1 (JetStream logs have no lease)."""
        return cls(epoch=1, owner=owner)

    def fenced_by(self, owner: str, lease_ms: int = 0) -> JetStreamLogMetadata:
        return replace(self, epoch=self.epoch + 1, owner=owner)

    def truncated(self, upto: LogAddress) -> JetStreamLogMetadata:
        """Discard everything at or before ``upto`` (the point only moves forward)."""
        if self.truncation is not None and upto <= self.truncation:
            return self
        return replace(self, truncation=upto)

    def acknowledged_up_to(self, sequence: int) -> JetStreamLogMetadata:
        """Record that JetStream acknowledged the record at ``sequence`` (the mark only moves forward)."""
        if self.acknowledged is not None and sequence <= self.acknowledged:
            return self
        return replace(self, acknowledged=sequence)

    def serialize(self) -> bytes:
        truncation = self.truncation
        document: dict[str, object] = {
            "format": FORMAT,
            "epoch": self.epoch,
            "owner": self.owner,
            "truncation": None if truncation is None else [truncation.ledger_id, truncation.entry_id, truncation.epoch],
        }
        if self.acknowledged is not None:
            document["acknowledged"] = self.acknowledged
        return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> JetStreamLogMetadata:
        """Decode :meth:`serialize` output; raises :class:`DataLogCorruptedError` otherwise."""
        try:
            document = json.loads(data)
            if document.get("format") != FORMAT:
                raise ValueError(f"not a JetStream log record (format {document.get('format')!r})")
            point = document["truncation"]
            truncation = None if point is None else LogAddress(int(point[0]), int(point[1]), int(point[2]))
            acknowledged = document.get("acknowledged")
            return cls(
                epoch=int(document["epoch"]),
                owner=str(document["owner"]),
                truncation=truncation,
                acknowledged=None if acknowledged is None else int(acknowledged),
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise DataLogCorruptedError(f"unreadable JetStream log metadata: {exc}") from exc
