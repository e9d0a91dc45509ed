"""Hypothesis strategies for every wire command, derived from each command's declared layout."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from segment_store.protocol import (
    REGISTRY,
    Event,
    Padding,
    SegmentsBatchMerged,
    TableEntry,
    TableIteratorArgs,
    TableKey,
    TableValue,
    WireCommand,
)
from segment_store.protocol.commands.appends import EMBEDDED_EVENT
from segment_store.protocol.commands.tables import ITERATOR_ARGS, TABLE_ENTRIES, TABLE_KEY
from segment_store.protocol.layout import Record
from segment_store.protocol.types import BLOB, REST, UTF, Fixed, Kind, ListOf, Opt

INT_RANGES = {"b": (-(2**7), 2**7 - 1), "i": (-(2**31), 2**31 - 1), "q": (-(2**63), 2**63 - 1)}

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
payloads = st.binary(max_size=64)
table_keys = st.one_of(
    st.just(TableKey.EMPTY),
    st.builds(TableKey, st.binary(min_size=1, max_size=16), st.integers(*INT_RANGES["q"])),
)
table_values = st.builds(TableValue, st.binary(max_size=16))
table_entries = st.lists(st.builds(TableEntry, table_keys, table_values), max_size=4).map(tuple)
iterator_args = st.builds(TableIteratorArgs, payloads, payloads, payloads)


def for_kind(kind: Kind) -> st.SearchStrategy[Any]:
    """A strategy of values that ``kind`` can encode."""
    if isinstance(kind, Opt):
        return for_kind(kind.inner)
    if isinstance(kind, Fixed):
        if kind.fmt == "?":
            return st.booleans()
        if kind.fmt == "16s":
            return st.uuids(allow_nil=True)
        if kind.label != "int32" and kind.fmt == "i":  # an error-code enum
            return st.sampled_from(list(type(kind.decode(0))))  # type: ignore[misc]
        return st.integers(*INT_RANGES[kind.fmt or "q"])
    if kind is UTF:
        return texts
    if kind is BLOB or kind is REST:
        return payloads
    if kind is EMBEDDED_EVENT:
        return st.builds(Event, payloads)
    if kind is TABLE_KEY:
        return table_keys
    if kind is TABLE_ENTRIES:
        return table_entries
    if kind is ITERATOR_ARGS:
        return iterator_args
    if isinstance(kind, ListOf):
        return st.lists(for_kind(kind.element), max_size=4).map(tuple)
    if isinstance(kind, Record):
        return for_record(kind.cls)
    raise AssertionError(f"no strategy for {kind!r}")


def for_record(cls: type[Any]) -> st.SearchStrategy[Any]:
    layout = cls.LAYOUT
    names = [f.name for f in dataclasses.fields(cls)]
    return st.builds(cls, **{n: for_kind(k) for n, k in zip(names, layout, strict=True)})


def _batch_merged() -> st.SearchStrategy[SegmentsBatchMerged]:
    pairs = st.lists(st.tuples(texts, st.integers(*INT_RANGES["q"])), max_size=4)
    return st.builds(
        lambda req, target, p: SegmentsBatchMerged(req, target, tuple(a for a, _ in p), tuple(b for _, b in p)),
        st.integers(*INT_RANGES["q"]),
        texts,
        pairs,
    )


def for_command(cls: type[WireCommand]) -> st.SearchStrategy[WireCommand]:
    if cls is Padding:
        return st.builds(Padding, st.integers(0, 64))
    if cls is SegmentsBatchMerged:
        return _batch_merged()
    return for_record(cls)


COMMAND_CLASSES = sorted(REGISTRY.values(), key=lambda c: c.TYPE_CODE)
any_command = st.one_of([for_command(c) for c in COMMAND_CLASSES])
