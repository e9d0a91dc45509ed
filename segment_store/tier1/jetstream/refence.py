"""Which of an owner's pending records a stream holds for good, read back after the owner fenced it again.

An owner of epoch ``e`` whose appends went unanswered (a NATS server lost, a stream leader being elected) does
not know which of its published records JetStream stored. It fences the log again in place (see "Re-fencing" in
:mod:`.log`): a new epoch ``e+1`` CASed over its own metadata version, then the fence of ``e+1`` at sequence
``F``. From then on no record of epoch ``e`` can join the log: one stored after ``F`` has a lower epoch than a fence
before it, and readers drop it. So the records between its last acknowledged one and ``F`` are final, and
:func:`stored_run` says which pending entries they hold, by the rule every reader applies
(:class:`~.records.RecordFilter`): the records of epoch ``e`` that continue its run of indexes, without a break,
up to the first fence of a higher epoch. Those entries are acknowledged at their addresses; the others are
published again under epoch ``e+1``.
"""

from __future__ import annotations

from collections.abc import Iterable

from segment_store.tier1.jetstream.client import (
    ERR_WRONG_LAST_SEQUENCE,
    JetStreamError,
    JetStreamRequestError,
    JetStreamUnavailableError,
)
from segment_store.tier1.jetstream.records import KIND_FENCE, Record
from segment_store.tier1.log import DataLogCorruptedError


def refenceable(error: JetStreamError) -> bool:
    """An append failure a re-fence may heal: no stream leader, or a record that did not follow its predecessor
    (one before it was lost, or another owner fenced us: the re-fence's CAS finds that out)."""
    if isinstance(error, JetStreamUnavailableError):
        return True
    return isinstance(error, JetStreamRequestError) and error.err_code == ERR_WRONG_LAST_SEQUENCE


def stored_run(records: Iterable[Record], epoch: int, next_index: int) -> list[Record]:
    """The data records of ``epoch`` that continue its run from index ``next_index`` in ``records`` (stream order,
    starting right after the last record whose entries were acknowledged): every reader accepts exactly these.

    Stops at the first break in the run or at a fence of a higher epoch (a duplicate of the new fence, published
    twice because an answer was lost: readers drop what follows it). Records of lower epochs are a zombie's and are
    skipped. Data of a higher epoch before any fence of it cannot be (raises :class:`DataLogCorruptedError`).
    """
    run: list[Record] = []
    for record in records:
        if record.kind == KIND_FENCE:
            if record.epoch > epoch:
                break
            continue
        if record.epoch < epoch:
            continue
        if record.epoch > epoch:
            raise DataLogCorruptedError(
                f"message {record.sequence}: data of epoch {record.epoch} before any fence above epoch {epoch}"
            )
        if record.index != next_index:
            break
        run.append(record)
        next_index += record.count
    return run
