"""Options ``startingTimestamp`` / ``endingTimestamp`` (one epoch ms, or a JSON object of stream -> epoch ms, as
Kafka's ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``) and ``startingTimestampStrategy``.

* One integer: every stream read is cut at that time.
* A JSON object ``{"<stream>" or "<scope>/<stream>": <epoch ms>, ...}``: each stream it names is cut at its time;
  a bare name is in option ``scope`` (with ``streams``: the listed stream of that name). A key must name a stream
  the query reads (the ``stream``, one of ``streams``, or a name of ``scope`` that ``streamPattern`` matches),
  else the option fails naming the key. A stream the object leaves out starts (ends) at ``startingOffsets``
  (``endingOffsets``) - given, ``earliest`` or ``latest`` only; else the query's default: earliest for a batch
  read, latest for a streaming one, and the tail for an end. Kafka instead requires every partition.
* ``startingTimestampStrategy`` (Kafka's ``startingOffsetsByTimestampStrategy``): what a start time after the
  stream's last event means: ``latest`` (default, what segstore always did: the tail when looked up; later events
  are read) or ``error`` (Kafka's default: the query fails naming the option and the stream). An end time after
  the last event is the tail, as in Kafka.

Everything here is parsed once, at the query's start; errors are one line naming the option.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pravega_spark.errors import OffsetFormatError, SegstoreOptionError
from pravega_spark.options.common import Options, StreamTarget

BeyondTail = Literal["latest", "error"]
STRATEGIES: tuple[BeyondTail, ...] = ("latest", "error")
Fallback = Literal["earliest", "latest"]


@dataclass(frozen=True, slots=True)
class StreamTimestamps:
    """A time per stream (epoch ms), sorted by stream; ``otherwise``: where the streams left out start or end
    (None: the query's default, filled in by ``ReadOptions.starting_or``), ``otherwise_option`` its option."""

    times_ms: tuple[tuple[str, str, int], ...]
    otherwise: Fallback | None = None
    otherwise_option: str = "startingOffsets"

    def time_of(self, scope: str, stream: str) -> int | None:
        return next((ms for s, n, ms in self.times_ms if (s, n) == (scope, stream)), None)

    def to_json(self) -> dict[str, Any]:
        """For a query's initial offset (the same JSON for the same options)."""
        found: dict[str, Any] = {"times": {f"{s}/{n}": ms for s, n, ms in self.times_ms}}
        if self.otherwise is not None:
            found["otherwise"] = self.otherwise
            found["otherwiseOption"] = self.otherwise_option
        return found

    @classmethod
    def from_json(cls, raw: object) -> StreamTimestamps:
        """Raises OffsetFormatError."""
        times = raw.get("times") if isinstance(raw, Mapping) else None
        if not isinstance(raw, Mapping) or not isinstance(times, Mapping):
            raise OffsetFormatError(f"initial offset: 'byStream' is not a time per stream: {raw!r}")
        parsed = []
        for key, ms in times.items():
            scope, _, stream = str(key).partition("/")
            if not scope or not stream or isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
                raise OffsetFormatError(f"initial offset: 'byStream' entry {key!r}: {ms!r}")
            parsed.append((scope, stream, ms))
        otherwise = raw.get("otherwise")
        if otherwise not in (None, "earliest", "latest"):
            raise OffsetFormatError(f"initial offset: 'otherwise' must be earliest or latest, got {otherwise!r}")
        return cls(tuple(sorted(parsed)), otherwise, str(raw.get("otherwiseOption", "startingOffsets")))


class Selection(Protocol):
    """Options ``streams`` / ``streamPattern`` (``pravega_spark.options.read.StreamSelection``)."""

    @property
    def names(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def pattern(self) -> str | None: ...

    def matches(self, name: str) -> bool: ...


def parse_times(
    view: Options, option: str, target: StreamTarget, selection: Selection | None
) -> int | StreamTimestamps | None:
    """Option ``option``: None if not given, the epoch ms of one integer, or the times of a JSON object whose keys
    name streams the query reads (option ``stream``, or ``selection``)."""
    raw = view.raw(option)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if not text.startswith("{"):
        if not text.isascii() or not text.isdigit():
            raise SegstoreOptionError(
                option, f"must be an integer >= 0 (epoch ms) or a JSON object of stream -> epoch ms, got {raw!r}"
            )
        return int(text)
    try:
        given = json.loads(text)
    except json.JSONDecodeError as error:
        raise SegstoreOptionError(
            option, f"not epoch ms, and not a JSON object of stream -> epoch ms ({error})"
        ) from None
    times: dict[tuple[str, str], int] = {}
    for key, ms in given.items():
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise SegstoreOptionError(option, f"stream {key!r}: the time must be an integer epoch ms >= 0, got {ms!r}")
        parts = key.strip().split("/")
        if len(parts) > 2 or not all(parts):
            raise SegstoreOptionError(option, f"each key must be 'stream' or 'scope/stream', got {key!r}")
        named = (parts[0], parts[1]) if len(parts) == 2 else (_scope_of(parts[0], target, selection), parts[0])
        problem = _not_read(named[0], named[1], target, selection)
        if problem is not None:
            raise SegstoreOptionError(option, f"stream {key!r}: {problem}")
        if named in times:
            raise SegstoreOptionError(option, f"stream {named[0]}/{named[1]} is named twice")
        times[named] = ms
    return StreamTimestamps(tuple(sorted((s, n, ms) for (s, n), ms in times.items())))


def _scope_of(name: str, target: StreamTarget, selection: Selection | None) -> str:
    """The scope of a bare stream name: the one stream of option ``streams`` so named, else option ``scope``."""
    listed = [scope for scope, stream in (selection.names if selection is not None else ()) if stream == name]
    return listed[0] if len(listed) == 1 else target.scope


def _not_read(scope: str, stream: str, target: StreamTarget, selection: Selection | None) -> str | None:
    """Why the query does not read ``scope/stream``; None if it does."""
    if selection is None:
        same = (scope, stream) == (target.scope, target.stream)
        return None if same else f"the query reads only {target.scope}/{target.stream}"
    if selection.pattern is not None:
        if scope == target.scope and selection.matches(stream):
            return None
        return (
            f"not read: option 'streamPattern' ({selection.pattern!r}) matches no such stream of scope {target.scope}"
        )
    if (scope, stream) in selection.names:
        return None
    return f"not read: not in option 'streams' ({', '.join(f'{s}/{n}' for s, n in selection.names)})"


def beyond_tail_strategy(view: Options, starting_given: bool) -> BeyondTail:
    """Option ``startingTimestampStrategy``: ``latest`` (default) or ``error``, any case; only with a start time."""
    raw = view.raw("startingTimestampStrategy")
    if raw is None or not raw.strip():
        return "latest"
    text = raw.strip().lower()
    if text not in STRATEGIES:
        raise SegstoreOptionError("startingTimestampStrategy", f"must be 'latest' or 'error', got {raw!r}")
    if not starting_given:
        raise SegstoreOptionError("startingTimestampStrategy", "means nothing without option 'startingTimestamp'")
    return "error" if text == "error" else "latest"
