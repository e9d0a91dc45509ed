"""Options of ``spark.read.format("segstore")`` and ``spark.readStream.format("segstore")``, parsed once.

What each option means is in the README's Spark section (one table for reads and writes, checked against
:mod:`pravega_spark.options.names`). An option reads do not take fails; every error is a
:class:`~pravega_spark.options.common.SegstoreOptionError` naming the option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from controller_client.model import InvalidModelError, validate_scope_name, validate_stream_name
from pravega_spark.errors import OffsetFormatError, SegstoreOptionError, StreamCutTextError
from pravega_spark.offsets import INITIAL, ReadState, initial_offset
from pravega_spark.options.admission import AdmissionOptions
from pravega_spark.options.common import DEFAULT_CONTROLLER_TIMEOUT_MS, Options, StreamTarget
from pravega_spark.options.stream_creation import StreamCreation
from pravega_spark.options.stream_cut_text import decode_text
from pravega_spark.options.tier2_location import Tier2Location
from pravega_spark.options.timestamps import BeyondTail, Fallback, StreamTimestamps, beyond_tail_strategy, parse_times

PositionKind = Literal["earliest", "latest", "cut", "timestamp"]
MetadataMode = Literal["Streams", "StreamInfo"]
METADATA_MODES: tuple[MetadataMode, ...] = ("Streams", "StreamInfo")


@dataclass(frozen=True, slots=True)
class Position:
    """Where a read starts or ends: a named end of the stream, a stream cut, or a time."""

    kind: PositionKind
    option: str
    """The option it came from (for error messages)."""
    cut: ReadState | None = None
    timestamp_ms: int | None = None
    by_stream: StreamTimestamps | None = None
    """A time per stream (kind ``timestamp``; :mod:`pravega_spark.options.timestamps`) instead of ``timestamp_ms``."""
    beyond_tail: BeyondTail = "latest"
    """Option ``startingTimestampStrategy``: what a start time after a stream's last event means."""

    @classmethod
    def earliest(cls, option: str) -> Position:
        return cls("earliest", option)

    @classmethod
    def latest(cls, option: str) -> Position:
        return cls("latest", option)

    @property
    def is_fixed(self) -> bool:
        """True for a stream cut that names every offset (no -1): it means the same bytes whenever it is
        looked up. ``earliest``, ``latest``, a time and a cut with -1 depend on when they are looked up."""
        return self.kind == "cut" and self.cut is not None and all(o >= 0 for o in self.cut.positions.values())

    def to_initial_offset(self, scope: str, stream: str) -> dict[str, Any]:
        """The query's initial offset for this position, not looked up yet (:func:`~pravega_spark.offsets.
        initial_offset`): the same JSON for the same options, whenever it is asked for."""
        start: dict[str, Any] = {"kind": self.kind, "option": self.option}
        if self.timestamp_ms is not None:
            start["timestampMs"] = self.timestamp_ms
        if self.by_stream is not None:
            start["byStream"] = self.by_stream.to_json()
        if self.beyond_tail != "latest":
            start["beyondTail"] = self.beyond_tail
        if self.cut is not None:
            start["cut"] = self.cut.to_offset()
        return initial_offset(scope, stream, start)

    @classmethod
    def from_initial_offset(cls, offset: Mapping[str, Any]) -> Position:
        """The position an initial offset of :meth:`to_initial_offset` stands for. Raises OffsetFormatError."""
        start = offset.get(INITIAL)
        if not isinstance(start, Mapping) or start.get("kind") not in ("earliest", "latest", "cut", "timestamp"):
            raise OffsetFormatError(f"not an initial offset of this source: {offset!r}")
        kind = start["kind"]
        option = str(start.get("option", "startingOffsets"))
        strategy: BeyondTail = "error" if start.get("beyondTail") == "error" else "latest"
        if kind == "timestamp" and "byStream" in start:
            return cls(
                "timestamp", option, by_stream=StreamTimestamps.from_json(start["byStream"]), beyond_tail=strategy
            )
        if kind == "timestamp":
            timestamp = start.get("timestampMs")
            if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
                raise OffsetFormatError(f"initial offset: 'timestampMs' must be epoch ms, got {timestamp!r}")
            return cls("timestamp", option, timestamp_ms=timestamp, beyond_tail=strategy)
        if kind == "cut":
            cut = ReadState.from_offset(start.get("cut"), offset.get("scope"), offset.get("stream"), allow_end=True)
            return cls("cut", option, cut=cut)
        return cls(kind, option)


@dataclass(frozen=True, slots=True)
class SplitOptions:
    """Options ``maxBytesPerPartition`` and ``minPartitions`` (None: not given), by which
    :mod:`pravega_spark.read.splitting` cuts segment ranges into input partitions."""

    max_bytes_per_partition: int | None = None
    min_partitions: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes_per_partition is not None and self.max_bytes_per_partition < 1:
            raise ValueError("maxBytesPerPartition: must be at least 1")
        if self.min_partitions is not None and self.min_partitions < 1:
            raise ValueError("minPartitions: must be at least 1")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The parsed read options (see the module docstring)."""

    target: StreamTarget
    starting: Position | None
    """None: the default of the query kind (earliest for batch, latest for streaming)."""
    ending: Position | None
    """None: not given (batch reads to the tail)."""
    max_bytes_per_trigger: int | None
    fail_on_data_loss: bool
    controller_timeout_ms: int
    tier2_location: str | None = None
    creation: StreamCreation = field(default_factory=lambda: StreamCreation(False, False))
    """Options allowCreateScope, allowCreateStream and default*: reads create nothing unless told to."""
    metadata: MetadataMode | None = None
    """Option ``metadata``: a batch read of the scope's streams or of the stream's head and tail cuts instead."""
    subscriber: str | None = None
    """Option ``subscriber``: a streaming query subscribes as this reader group
    (``pravega_spark.read.subscription``)."""
    watermark_column: str | None = None
    """Option ``watermarkColumn``: a timestamp column of this name with each event's watermark lower bound
    (:mod:`pravega_spark.read.watermark_column`)."""
    split: SplitOptions = field(default_factory=SplitOptions)
    """Options ``maxBytesPerPartition`` and ``minPartitions``: several input partitions per segment range
    (:mod:`pravega_spark.read.splitting`)."""
    admission: AdmissionOptions = field(default_factory=AdmissionOptions)
    """Options ``maxEventsPerTrigger``, ``minEventsPerTrigger``, ``maxTriggerDelay`` (read.admission)."""
    selection: StreamSelection | None = None
    """Options ``streams`` / ``streamPattern``: the query reads several streams (``target.stream`` is ``""``);
    None: the one stream of option ``stream``."""
    per_trigger: str | None = None
    """The name, as given, of an option that bounds micro-batches (``maxBytesPerTrigger`` or its alias,
    ``maxEventsPerTrigger``, ``minEventsPerTrigger``); None if none is. A batch read refuses them."""

    @property
    def controller_timeout_s(self) -> float:
        return self.controller_timeout_ms / 1000.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        view = Options.of(options, "read")
        metadata = metadata_mode(view)
        selection = StreamSelection.parse(view)
        if selection is not None and view.raw("scope") is None and selection.names:
            view = Options({**view.values, "scope": selection.names[0][0]}, view.kind, view.looked_up)
        target = StreamTarget.parse(view, require_stream=metadata != "Streams" and selection is None)
        if selection is not None:
            _check_selection(view, selection, target, metadata)
        starting = _position(
            view, "startingOffsets", ("start_stream_cut",), target, start=True, several=selection is not None
        )
        starting = _timed(view, "startingTimestamp", starting, target, selection)
        ending = _position(
            view, "endingOffsets", ("end_stream_cut",), target, start=False, several=selection is not None
        )
        ending = _timed(view, "endingTimestamp", ending, target, selection)
        max_bytes = view.integer("maxBytesPerTrigger", None, aliases=("approx_bytes_per_trigger",), minimum=1)
        split = SplitOptions(
            view.integer("maxBytesPerPartition", None, minimum=1), view.integer("minPartitions", None, minimum=1)
        )
        fail = view.boolean("failOnDataLoss", True)
        timeout = view.integer("controllerTimeoutMs", DEFAULT_CONTROLLER_TIMEOUT_MS, minimum=1)
        assert timeout is not None
        tier2 = view.raw("tier2Location")
        tier2_location = tier2.strip() if tier2 is not None and tier2.strip() else None
        if tier2_location is not None:
            _check_tier2_location(tier2_location)
        creation = StreamCreation.parse(view, create_by_default=False)
        if metadata is not None:
            given = starting or ending
            if given is not None or max_bytes is not None:
                option = (
                    given.option
                    if given is not None
                    else view.label("maxBytesPerTrigger", ("approx_bytes_per_trigger",))
                )
                raise SegstoreOptionError(
                    option, f"means nothing with option 'metadata' ({metadata}: no events are read)"
                )
            if split != SplitOptions():
                option = "maxBytesPerPartition" if split.max_bytes_per_partition is not None else "minPartitions"
                raise SegstoreOptionError(
                    option, f"means nothing with option 'metadata' ({metadata}: no events are read)"
                )
        subscriber = (view.raw("subscriber") or "").strip() or None
        column = watermark_column(view)
        if metadata is not None and column is not None:
            raise SegstoreOptionError("watermarkColumn", f"means nothing with option 'metadata' ({metadata})")
        if selection is not None:
            for name, value in (("subscriber", subscriber), ("watermarkColumn", column)):
                if value is not None:
                    raise SegstoreOptionError(
                        name, f"cannot be combined with option '{selection.option}' (it is for one stream)"
                    )
        admission = AdmissionOptions.parse(view)
        per_trigger = admission.given
        if max_bytes is not None:
            per_trigger = view.label("maxBytesPerTrigger", ("approx_bytes_per_trigger",))
        return cls(
            target,
            starting,
            ending,
            max_bytes,
            fail,
            timeout,
            tier2_location,
            creation,
            metadata,
            subscriber,
            column,
            split,
            admission,
            selection,
            per_trigger,
        )

    def check_batch(self) -> None:
        """Refuse, naming it, an option of streaming queries given to a batch read."""
        if self.subscriber is not None:
            raise SegstoreOptionError(
                "subscriber", "is for streaming queries (spark.readStream): a batch read commits no position"
            )
        if self.per_trigger is not None:
            raise SegstoreOptionError(
                self.per_trigger,
                "is for streaming queries (spark.readStream): a batch read has no micro-batches, it reads from its "
                "start to its end at once",
            )

    def starting_or(self, default: Literal["earliest", "latest"]) -> Position:
        """The start; a stream a per-stream ``startingTimestamp`` leaves out starts at ``default`` if no
        ``startingOffsets`` is given."""
        if self.starting is None:
            return Position(default, "startingOffsets")
        times = self.starting.by_stream
        if times is not None and times.otherwise is None:
            return replace(self.starting, by_stream=replace(times, otherwise=default))
        return self.starting


EVENT_COLUMNS = ("event", "scope", "stream", "segment_id", "offset", "timestamp")
"""The columns of a read of events, in order (the schema: :data:`pravega_spark.read.source.SCHEMA`)."""


def watermark_column(view: Options) -> str | None:
    """Option ``watermarkColumn``: the name of the added column, None if not given (or blank)."""
    name = (view.raw("watermarkColumn") or "").strip()
    if not name:
        return None
    if name.lower() in EVENT_COLUMNS:
        raise SegstoreOptionError(
            "watermarkColumn", f"{name!r} is a column of the source already ({', '.join(EVENT_COLUMNS)}); pick another"
        )
    return name


def metadata_mode(view: Options) -> MetadataMode | None:
    """Option ``metadata``: ``Streams`` or ``StreamInfo`` (any case), as the Pravega Spark connector names them."""
    raw = view.raw("metadata")
    if raw is None or not raw.strip():
        return None
    for mode in METADATA_MODES:
        if raw.strip().lower() == mode.lower():
            return mode
    raise SegstoreOptionError(
        "metadata", f"must be 'Streams' (the streams of the scope) or 'StreamInfo' (head and tail cuts), got {raw!r}"
    )


def _position(
    view: Options, option: str, aliases: tuple[str, ...], target: StreamTarget, *, start: bool, several: bool = False
) -> Position | None:
    """A start (``earliest``, ``latest``, ``unbounded`` = the head, a cut) or an end (``latest``, ``unbounded`` = no
    end: a batch read to the tail, a streaming query forever, a cut); None if not given or ``unbounded`` end."""
    raw = view.raw(option, aliases)
    if raw is None or not raw.strip():
        return None
    label = view.label(option, aliases)
    text = raw.strip()
    lowered = text.lower()
    if several and lowered not in ("latest", "unbounded", "earliest"):
        raise SegstoreOptionError(
            label, "a stream cut names one stream: with several streams give 'earliest', 'latest' or a timestamp"
        )
    if lowered == "latest":
        return Position.latest(label)
    if lowered == "unbounded":
        return Position.earliest(label) if start else None
    if lowered == "earliest":
        if not start:
            raise SegstoreOptionError(
                label, "'earliest' is not allowed here; use 'latest', 'unbounded' or a stream cut"
            )
        return Position.earliest(label)
    return Position("cut", label, cut=parse_cut_option(label, text, target.scope, target.stream))


def _timed(
    view: Options, option: str, given: Position | None, target: StreamTarget, selection: StreamSelection | None
) -> Position | None:
    """``given`` (``startingOffsets`` / ``endingOffsets``) with option ``option`` (``startingTimestamp`` /
    ``endingTimestamp``: :mod:`pravega_spark.options.timestamps`) over it."""
    start = option == "startingTimestamp"
    times = parse_times(view, option, target, selection)
    strategy = beyond_tail_strategy(view, times is not None) if start else "latest"
    if times is None:
        return given
    if given is not None and (isinstance(times, int) or given.kind not in ("earliest", "latest")):
        raise SegstoreOptionError(option, f"cannot be combined with option '{given.option}'")
    if isinstance(times, int):
        return Position("timestamp", option, timestamp_ms=times, beyond_tail=strategy)
    otherwise: Fallback | None = None if start else "latest"
    if given is not None:
        otherwise = "earliest" if given.kind == "earliest" else "latest"
    fallback = given.option if given is not None else ("startingOffsets" if start else "endingOffsets")
    by_stream = replace(times, otherwise=otherwise, otherwise_option=fallback)
    return Position("timestamp", option, by_stream=by_stream, beyond_tail=strategy)


def parse_cut_option(option: str, text: str, scope: str, stream: str) -> ReadState:
    """The value of a stream-cut option: JSON, or the Base64 text of the Pravega client's ``StreamCut.asText()``
    (:mod:`pravega_spark.options.stream_cut_text`); errors name the option."""
    try:
        if text.lstrip()[:1] in ("{", "[", '"'):  # JSON (no Base64 text starts so)
            return ReadState.from_json(text, scope, stream)
        try:
            found_scope, found_stream, positions = decode_text(text)
        except StreamCutTextError as error:
            raise OffsetFormatError(f"not JSON, and not a Pravega Base64 stream cut: {error}") from None
        cut = {"scope": found_scope, "stream": found_stream, "positions": {str(s): o for s, o in positions.items()}}
        return ReadState.from_offset(cut, scope, stream, allow_end=True)
    except OffsetFormatError as error:
        raise SegstoreOptionError(
            option,
            f"not a stream cut of {scope}/{stream} ({error}); expected 'earliest', 'latest', 'unbounded', JSON like "
            '{"positions": {"<segment id>": <offset>}} or the Base64 text of a Pravega StreamCut (asText())',
        ) from None


@dataclass(frozen=True, slots=True)
class StreamSelection:
    """Options ``streams`` (``names``: each ``stream`` or ``scope/stream``; a bare name is in option ``scope``) and
    ``streamPattern`` (``pattern``: a regular expression that must match a whole stream name of option ``scope``;
    streams whose name starts with ``_``, internal ones, never match)."""

    option: str
    names: tuple[tuple[str, str], ...] = ()
    pattern: str | None = None

    @classmethod
    def parse(cls, view: Options) -> StreamSelection | None:
        """None when neither option is given. Raises SegstoreOptionError naming the option."""
        listed, pattern = view.raw("streams"), view.raw("streamPattern")
        if listed is not None and pattern is not None:
            raise SegstoreOptionError("streamPattern", "give either option 'streams' or 'streamPattern', not both")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise SegstoreOptionError("streamPattern", f"not a regular expression ({error}): {pattern!r}") from None
            return cls("streamPattern", pattern=pattern)
        if listed is None:
            return None
        return cls("streams", names=tuple(dict.fromkeys(_listed_stream(view, item) for item in listed.split(","))))

    def matches(self, name: str) -> bool:
        """Whether a stream of the scope named ``name`` is read (pattern mode)."""
        return self.pattern is not None and not name.startswith("_") and re.fullmatch(self.pattern, name) is not None


def _listed_stream(view: Options, item: str) -> tuple[str, str]:
    text = item.strip()
    parts = text.split("/")
    if len(parts) == 1 and text:
        scope = (view.raw("scope") or "").strip()
        if not scope:
            raise SegstoreOptionError(
                "streams", f"{text!r} names no scope: write 'scope/{text}' or give option 'scope'"
            )
        return scope, text
    if len(parts) != 2 or not all(parts):
        raise SegstoreOptionError("streams", f"each entry must be 'stream' or 'scope/stream', got {item!r}")
    return parts[0], parts[1]


def _check_selection(view: Options, selection: StreamSelection, target: StreamTarget, metadata: str | None) -> None:
    if target.stream:
        raise SegstoreOptionError(
            selection.option, f"give either option 'stream' or option '{selection.option}', not both"
        )
    if metadata is not None:
        raise SegstoreOptionError(selection.option, f"means nothing with option 'metadata' ({metadata})")
    for scope, stream in selection.names:
        try:
            validate_scope_name(scope)
            validate_stream_name(stream)
        except InvalidModelError as error:
            raise SegstoreOptionError("streams", f"{scope}/{stream}: {error}") from None


def _check_tier2_location(value: str) -> None:
    Tier2Location.parse(value, "tier2Location")
