"""Which incarnation of a stream a table belongs to: a stream deleted and created again under the same name is a
new stream, and its rows never go into its predecessor's table.

**The incarnation** of a stream is the creation time (epoch ms) of its epoch-0 segments, as the segment store
that created each recorded it (the segment's ``CREATION_TIME`` attribute in its container's metadata). The
controller creates every epoch-0 segment when it creates the stream, and a stream created again starts again at
epoch 0 with the same segment names and ids (ids restart at 0: they tell two incarnations nothing), so the
creation time is what differs. The maintainer learns it on the event loop, from the container metadata of the
segments it collects (:func:`incarnation_of`: the earliest epoch-0 creation time among them; None when none of
the stream's epoch-0 segments is here, e.g. deleted by retention after a scale).

**The table records it** as property :data:`PROPERTY` when created; a table without one (made by an older
version) is given it on its first pass that knows the incarnation, unless it belongs to a predecessor.

**Rule** (:func:`predecessor`): a table belongs to a deleted predecessor when its recorded incarnation is more
than :data:`TOLERANCE_MS` older than the stream's (one incarnation's epoch-0 segments are created within moments
of each other, maybe by several segment stores' clocks); a table with no recorded incarnation, when it holds
events and all of them were ingested more than :data:`TOLERANCE_MS` before the stream's incarnation (no event of
a stream predates it). Such a table is never written again: it is renamed aside to
``<stream>__deleted_<its incarnation>`` in the same namespace (:func:`set_aside`; for a table with no recorded
incarnation, its last commit's time), its location and files untouched, and a fresh table takes the stream's
name, at a location of its own (:func:`fresh_location`: the two never share a metadata directory, whose
cleanup would delete the other's manifests). A catalog that cannot rename tables fails the table's passes with
:class:`PredecessorTableError` until an operator drops or renames the old table. Not told apart: a stream
deleted and created again within :data:`TOLERANCE_MS` of its previous creation, and any incarnation while none
of its epoch-0 segments is seen (the table is written as before). Told apart wrongly, once: an incarnation whose
epoch-0 segments were created over :data:`TOLERANCE_MS` apart (segment stores' clocks that far apart, a stream
creation the controller resumed after a failure) may have its own table set aside by the store seeing the later
one; the fresh table then records that later time, which every store accepts (an older incarnation than the
table's is never a predecessor's), and all the chunks are registered in it again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from segstore_shared.errors import SegstoreError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

PROPERTY = "segstore.stream-incarnation"
"""Table property: the incarnation (epoch ms, decimal) of the stream whose rows the table holds."""
TOLERANCE_MS = 1000
"""How far apart the creation times of one incarnation's epoch-0 segments may be (creation latency, clock skew)."""
ASIDE_SUFFIX = "__deleted_"


class PredecessorTableError(SegstoreError):
    """The stream's table belongs to a deleted stream of the same name and the catalog cannot rename it aside."""


def incarnation_of(created_ms: Iterable[int | None]) -> int | None:
    """The incarnation from the creation times of the stream's epoch-0 segments seen (None: none known)."""
    return min((t for t in created_ms if t is not None), default=None)


def recorded(table: Table) -> int | None:
    """The incarnation the table records (None: none, or not a number)."""
    value = table.properties.get(PROPERTY)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def newest_event_ms(table: Table, files: Iterable[DataFile]) -> int | None:
    """The latest ingestion time among ``files``' rows, from their ``timestamp`` upper bounds (None: no files, or
    a file without the bound)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import TimestamptzType

    field_id = table.schema().find_field("timestamp").field_id
    newest: int | None = None
    for file in files:
        bound = (file.upper_bounds or {}).get(field_id)
        if bound is None:
            return None
        micros = from_bytes(TimestamptzType(), bound)
        assert isinstance(micros, int)
        newest = micros // 1000 if newest is None else max(newest, micros // 1000)
    return newest


def predecessor(table: Table, files: Iterable[DataFile], incarnation: int) -> str | None:
    """The predecessor's label (what its aside name ends in) if ``table`` (holding ``files``) belongs to a deleted
    stream of the same name by the module's rule, else None."""
    mine = recorded(table)
    if mine is not None:
        return str(mine) if mine < incarnation - TOLERANCE_MS else None
    newest = newest_event_ms(table, files)
    if newest is None or newest >= incarnation - TOLERANCE_MS:
        return None
    snapshot = table.current_snapshot()
    return str(snapshot.timestamp_ms if snapshot is not None else newest)


def set_aside(catalog: Catalog, scope: str, stream: str, label: str) -> str:
    """Rename table ``scope.stream`` to ``scope.<stream>__deleted_<label>``; returns the new name. Raises
    :class:`PredecessorTableError` if the catalog cannot rename tables, and what the catalog raises otherwise."""
    aside = f"{stream}{ASIDE_SUFFIX}{label}"
    try:
        catalog.rename_table((scope, stream), (scope, aside))
    except NotImplementedError as error:
        raise PredecessorTableError(
            f"table {scope}.{stream} belongs to a deleted stream of the same name: drop or rename it "
            f"(catalog {type(catalog).__name__} cannot rename it)"
        ) from error
    return aside


def fresh_location(old_location: str, incarnation: int) -> str:
    """A location for the new incarnation's table next to its predecessor's: the old one with any previous
    incarnation suffix replaced by ``__<incarnation>``."""
    base = re.sub(r"__\d+$", "", old_location.rstrip("/"))
    return f"{base}__{incarnation}"


__all__ = [
    "ASIDE_SUFFIX",
    "PROPERTY",
    "TOLERANCE_MS",
    "PredecessorTableError",
    "fresh_location",
    "incarnation_of",
    "newest_event_ms",
    "predecessor",
    "recorded",
    "set_aside",
]
