"""Parsers of what users type on the admin command line, and the labels shown for segments.

Pure functions: each takes text and returns a value or raises ``argparse.ArgumentTypeError`` with a message
that says what was expected (argparse turns it into a usage error, exit code 2). Messages show what was typed as
it was typed, without quotes, as every admin message shows names.

Segments are shown and typed as the last part of their qualified name: ``3`` is segment number 3 of epoch 0,
``3.#epoch.1`` number 3 created in epoch 1 (``scope/stream/3.#epoch.1`` is the segment's whole name, as in
Pravega). A stream cut is ``SEGMENT=OFFSET`` pairs separated by commas, as ``stream describe`` shows them.
"""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Callable

from controller_client.model import (
    EPOCH_DELIMITER,
    InvalidModelError,
    SegmentName,
    creation_epoch,
    parse_segment_name,
    segment_number,
    validate_scope_name,
    validate_stream_name,
)

_DURATION = re.compile(r"^(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d|w)?$")
_DURATION_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE = re.compile(r"^(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B|B)?$", re.IGNORECASE)
_SIZE_FACTOR = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


NAME_CHARACTERS = "letters, digits, . - and _ only"


def _bad(what: str, text: str, expected: str) -> argparse.ArgumentTypeError:
    if not text:
        return argparse.ArgumentTypeError(f"{what}: empty, expected {expected}")
    return argparse.ArgumentTypeError(f"{what} {text}: expected {expected}")


def _valid(text: str, validate: Callable[[str], str], what: str) -> str:
    try:
        return validate(text)
    except InvalidModelError:
        raise argparse.ArgumentTypeError(f"{what}: not a valid name ({NAME_CHARACTERS})") from None


def scope_name(text: str) -> str:
    """A scope name (letters, digits, ``.``, ``-``, ``_``)."""
    if not text:
        raise argparse.ArgumentTypeError("scope: empty, expected a name")
    return _valid(text, validate_scope_name, f"scope {text}")


def scoped_name(text: str) -> tuple[str, str]:
    """``scope/name`` (a stream or a reader group) -> ``(scope, name)``."""
    scope, sep, name = text.partition("/")
    if not sep or "/" in name or not scope or not name:
        raise _bad("name", text, "SCOPE/NAME, e.g. shop/orders")
    return _valid(scope, validate_scope_name, f"name {text}"), _valid(name, validate_stream_name, f"name {text}")


def segment_label(segment_id: int) -> str:
    """What a segment is shown as: its number, with ``.#epoch.E`` when it was created after epoch 0."""
    epoch = creation_epoch(segment_id)
    number = segment_number(segment_id)
    return f"{number}{EPOCH_DELIMITER}{epoch}" if epoch else str(number)


def endpoint_label(host: str, port: int) -> str:
    """``host:port`` (``[v6]:port``), as endpoints are shown."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def segment_ref(text: str) -> int:
    """A segment as shown by :func:`segment_label` (``3`` or ``3.#epoch.1``) -> its 64-bit id."""
    try:
        return parse_segment_name(f"s/s/{text.strip()}").segment_id
    except InvalidModelError:
        raise _bad("segment", text, "a segment number, optionally with its epoch: 3 or 3.#epoch.1") from None


def segment_refs(text: str) -> list[int]:
    """Comma-separated segments (:func:`segment_ref`), at least one, no repeats."""
    ids = [segment_ref(part) for part in text.split(",") if part.strip()]
    if not ids:
        raise _bad("segments", text, "one or more segments separated by commas, e.g. 0,1")
    if len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"segments {text}: a segment is named twice")
    return ids


def qualified_segment(text: str) -> SegmentName:
    """A stream segment's whole name, ``scope/stream/3.#epoch.1`` (``.#epoch.0`` may be left out)."""
    try:
        name = parse_segment_name(text.strip())
        validate_scope_name(name.scope)
        validate_stream_name(name.stream)
    except InvalidModelError:
        raise _bad("segment name", text, "SCOPE/STREAM/NUMBER[.#epoch.EPOCH], e.g. shop/orders/3.#epoch.1") from None
    return name


def key_ranges(text: str) -> list[tuple[float, float]]:
    """``0-0.5,0.5-1`` -> ``[(0.0, 0.5), (0.5, 1.0)]``: contiguous, ascending, within [0, 1]."""
    ranges: list[tuple[float, float]] = []
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            start, end = float(low), float(high)
        except ValueError:
            raise _bad("key ranges", text, "START-END pairs separated by commas, e.g. 0-0.5,0.5-1") from None
        if not sep or not 0.0 <= start < end <= 1.0:
            raise _bad("key range", part.strip(), "START-END with 0 <= START < END <= 1")
        if ranges and ranges[-1][1] != start:
            raise argparse.ArgumentTypeError(f"key ranges {text}: each range must start where the one before ends")
        ranges.append((start, end))
    return ranges


def stream_cut(text: str) -> dict[int, int]:
    """``0=512,1.#epoch.1=0`` (``SEGMENT=OFFSET`` pairs, as ``stream describe`` shows cuts) -> {id: offset}."""
    positions: dict[int, int] = {}
    for part in text.split(","):
        segment, sep, offset = part.strip().partition("=")
        if not sep or not offset.strip().isdigit():
            raise _bad("stream cut", text, "SEGMENT=OFFSET pairs separated by commas, e.g. 0=512,1=0")
        segment_id = segment_ref(segment)
        if segment_id in positions:
            raise argparse.ArgumentTypeError(f"stream cut {text}: segment {segment.strip()} is named twice")
        positions[segment_id] = int(offset)
    return positions


def duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (a bare number is milliseconds) -> milliseconds."""
    found = _DURATION.match(text.strip().lower())
    if found is None:
        raise _bad("duration", text, "a number with a unit: ms, s, m, h, d or w (e.g. 7d)")
    return round(float(found["value"]) * _DURATION_MS[found["unit"] or "ms"])


def size_bytes(text: str) -> int:
    """``512``, ``64KiB``, ``10MB``, ``1.5GiB`` (KB = 1000 bytes, KiB = 1024) -> bytes."""
    found = _SIZE.match(text.strip())
    if found is None:
        raise _bad("size", text, "a number of bytes, optionally with a unit: B, KB, KiB, MB, MiB, GB, GiB, TB, TiB")
    return round(float(found["value"]) * _SIZE_FACTOR[(found["unit"] or "b").lower()])


def timestamp_ms(text: str, now_ms: int) -> int:
    """A point in time -> milliseconds since the Unix epoch: a bare number is such milliseconds already,
    ``DURATION ago`` (``1h ago``) or ``-DURATION`` is that long before ``now_ms``, else an ISO 8601 date and
    time (``2026-05-01T12:00``, UTC unless it names an offset)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    if value.startswith("-"):
        return now_ms - duration_ms(value[1:])
    if value.lower().endswith(" ago"):
        return now_ms - duration_ms(value[: -len(" ago")])
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise _bad("time", text, "ISO 8601 (2026-05-01T12:00:00Z), ms since 1970, or DURATION ago (1h ago)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return round(moment.timestamp() * 1000)
