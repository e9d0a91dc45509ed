"""Driver side of a query over several streams (options ``streams`` and ``streamPattern``).

The query's offset is a :class:`~pravega_spark.offsets.StreamsState`: one read state per stream it reads now. Each
stream moves on exactly as a single-stream query does (:mod:`pravega_spark.read.planning`: each event once, per-key
order, scaling followed); here is only what spans streams:

* **Which streams** (:class:`StreamSet`): the listed ones, or the streams of the scope whose name the pattern matches
  whole (never an internal one, ``_`` first), looked up again at every ``latestOffset``. A stream that appears (a
  new one matching the pattern, or one added to ``streams`` before a restart) enters the offset at its **head**, and
  that micro-batch reads nothing of it: the next one reads it from there (as Kafka's ``subscribePattern`` reads a new
  topic from its earliest offset). A stream that is gone (deleted, or left out of the options at a restart) leaves
  the offset; its unread rest is not read, and nothing fails.
* **Admission control** (:func:`share_budget`): ``maxBytesPerTrigger`` over all streams together, shared evenly; what
  a stream does not need goes to the others. Each stream with a share admits at least one event, so a micro-batch
  may pass the limit by at most one event per stream.
* **Planning** (:func:`plan_streams`): the ranges between two states, stream by stream: a stream missing from the
  start (it entered at the end: its head) or from the end (gone) has none, so a replayed batch reads the same events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from controller_client.errors import ControllerFailureError, ScopeNotFoundError, StreamNotFoundError
from controller_client.model import StreamCut
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import DataLossError, SegstoreOptionError
from pravega_spark.offsets import ReadState, StreamKey, StreamsState, head_cut
from pravega_spark.options.read import StreamSelection
from pravega_spark.read.planning import LiveCatalog, ReadRange, advance, plan_ranges
from segment_store.client import NoSuchSegmentError

_log = logging.getLogger(__name__)

CatalogOf = Callable[[StreamKey], LiveCatalog]


class StreamSet:
    """The streams a query reads (see the module docstring); ``scope``: option ``scope`` (the pattern's)."""

    def __init__(self, selection: StreamSelection, scope: str) -> None:
        self.selection = selection
        self.scope = scope

    def current(self, connection: StreamConnection, *, strict: bool = False) -> list[StreamKey]:
        """The streams to read now, sorted. ``strict`` (at the start of a query): a listed stream or the scope
        that is missing fails, naming the option; later they are left out."""
        if self.selection.pattern is not None:
            return sorted(
                (self.scope, n) for n in self._names(connection, self.scope, strict) if self.selection.matches(n)
            )
        found: dict[str, set[str]] = {}
        for scope, _ in self.selection.names:
            if scope not in found:
                found[scope] = set(self._names(connection, scope, strict))
        missing = [f"{s}/{n}" for s, n in self.selection.names if n not in found[s]]
        if missing and strict:
            raise SegstoreOptionError("streams", f"stream(s) {', '.join(missing)} do not exist")
        return sorted((s, n) for s, n in self.selection.names if n in found[s])

    def _names(self, connection: StreamConnection, scope: str, strict: bool) -> list[str]:
        try:
            return connection.run(connection.manager.list_streams(scope))
        except ScopeNotFoundError:
            if strict:
                raise SegstoreOptionError("scope", f"scope {scope} does not exist") from None
            return []


GONE_WAIT_S = 10.0
"""How long a failed look-up waits for its stream to be gone before the failure counts (see :func:`_gone`)."""

_MAYBE_GONE = (DataLossError, StreamNotFoundError, NoSuchSegmentError, ControllerFailureError, SegstoreOptionError)
"""What a look-up in a stream being deleted can raise: its segments go first (data loss, no such segment), then
its records (the controller cannot answer), then the stream."""


def _gone(connection: StreamConnection, key: StreamKey) -> bool:
    """Whether ``key`` was deleted, asked after a look-up in it failed. A deletion removes the stream's segments,
    then its records, then the stream, so a look-up can fail while the stream still exists: the failure counts
    (False) only if the stream is still there ``GONE_WAIT_S`` later."""
    deadline = time.monotonic() + GONE_WAIT_S
    while connection.run(connection.manager.stream_exists(*key)):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)  # a deletion under way: its last step (the stream's node) follows its segments
    return True


def cuts(
    connection: StreamConnection, keys: Sequence[StreamKey], look_up: Callable[[StreamConnection, str, str], StreamCut]
) -> StreamsState:
    """The cut ``look_up`` finds in each stream (``head_cut``, ``tail_cut``), leaving out a stream deleted since it
    was listed."""
    states: dict[StreamKey, ReadState] = {}
    for key in keys:
        try:
            states[key] = ReadState.from_stream_cut(look_up(connection, *key))
        except _MAYBE_GONE:
            if not _gone(connection, key):
                raise
    return StreamsState(states)


def share_budget(available: Mapping[StreamKey, int], max_bytes: int) -> dict[StreamKey, int]:
    """Each stream's share of ``max_bytes``: even shares, a stream needing less than its share takes what it needs
    and leaves the rest to the others (smallest first; the remainder of the division goes to the last, so with
    ``max_bytes`` >= 1 some stream with bytes gets a share: it admits at least one event, a query always makes
    progress)."""
    shares = dict.fromkeys(available, 0)
    remaining = max_bytes
    waiting = sorted((size, key) for key, size in available.items() if size > 0)
    for index, (size, key) in enumerate(waiting):
        share = min(size, remaining // (len(waiting) - index))
        shares[key] = share
        remaining -= share
    return shares


def _bytes(start: ReadState, end: ReadState, catalog: LiveCatalog, fail_on_data_loss: bool) -> int:
    return sum(r.size for r in plan_ranges(start, end, catalog, fail_on_data_loss=fail_on_data_loss))


def advance_streams(
    connection: StreamConnection,
    start: StreamsState,
    streams: Sequence[StreamKey],
    catalog_of: CatalogOf,
    *,
    fail_on_data_loss: bool,
    max_bytes: int | None,
    target: StreamsState | None = None,
) -> StreamsState:
    """The end of the next micro-batch from ``start`` over the ``streams`` read now (new ones at their heads,
    gone ones dropped), at most ``max_bytes`` bytes in all if given, and within ``target`` if given
    (Trigger.AvailableNow: the streams and the positions there when it was prepared; no stream outside it)."""
    if target is not None:
        streams = [key for key in streams if key in target.states]
    states: dict[StreamKey, ReadState] = {}
    full: dict[StreamKey, ReadState] = {}
    new = [key for key in streams if key not in start.states]
    for key, head in cuts(connection, new, head_cut).states.items():
        _log.info("segstore: reading %s/%s from its head, from the next micro-batch on", *key)
        states[key] = head
    for key in streams:
        state = start.states.get(key)
        if state is None:
            continue
        cap = None if target is None else target.states[key].positions
        try:
            full[key] = advance(state, catalog_of(key), fail_on_data_loss=fail_on_data_loss, cap=cap)
        except _MAYBE_GONE:
            if not _gone(connection, key):
                raise
            _log.info("segstore: %s/%s was deleted; no longer read", *key)
            continue
        states[key] = full[key]
    if max_bytes is not None and full:
        available = {
            key: _bytes(start.states[key], end, catalog_of(key), fail_on_data_loss) for key, end in full.items()
        }
        for key, share in share_budget(available, max_bytes).items():
            if share < available[key]:
                cap = None if target is None else target.states[key].positions
                states[key] = (
                    start.states[key]
                    if share == 0
                    else advance(
                        start.states[key],
                        catalog_of(key),
                        fail_on_data_loss=fail_on_data_loss,
                        max_bytes=share,
                        cap=cap,
                    )
                )
    return StreamsState(dict(sorted(states.items())))


def plan_streams(
    connection: StreamConnection, start: StreamsState, end: StreamsState, catalog_of: CatalogOf, fail_on_data_loss: bool
) -> list[tuple[StreamKey, list[ReadRange]]]:
    """The ranges between ``start`` and ``end``, per stream (see the module docstring); a stream deleted since
    ``end`` was planned has none."""
    planned: list[tuple[StreamKey, list[ReadRange]]] = []
    for key, stop in sorted(end.states.items()):
        begin = start.states.get(key)
        if begin is None or begin == stop:
            continue
        catalog = catalog_of(key)
        catalog.forget_successors(begin.positions)  # of segments finished: a long query's cache stays small
        try:
            ranges = plan_ranges(begin, stop, catalog, fail_on_data_loss=fail_on_data_loss)
        except _MAYBE_GONE:
            if not _gone(connection, key):
                raise
            _log.info("segstore: %s/%s was deleted; its rest is not read", *key)
            continue
        if ranges:
            planned.append((key, ranges))
    return planned
