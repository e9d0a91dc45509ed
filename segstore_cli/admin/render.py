"""Views as aligned tables (``rich``) or as JSON.

:func:`to_json` gives plain JSON values (segments appear with their id, their label as the command line takes it,
and their qualified name); :func:`to_human` gives ``rich`` renderables: a title line, key-value grids and tables
without borders, numbers with thousands separators, so output lines up and stays greppable.
"""

from __future__ import annotations

import datetime
import io
import json
from collections.abc import Mapping, Sequence
from functools import singledispatch

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from controller_client.model import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfiguration,
    qualified_segment_name,
)
from segstore_cli.admin.parsing import segment_label
from segstore_cli.admin.views import (
    ACTIVE,
    SEALED,
    ControllersView,
    Cut,
    EpochView,
    Names,
    Outcome,
    ReaderGroupList,
    ReaderGroupView,
    SegmentInfoView,
    SegmentView,
    StreamView,
    segment_state,
)

READER_POSITIONS_NOTE = (
    "no reader positions: the group has no state in the official client's format (no such reader ever joined; "
    "Java readers keep theirs elsewhere)"
)
GROUP_LISTING_NOTE = (
    "only reader groups subscribed to a stream (retention MANUAL or AUTOMATIC) are listed: this controller has "
    "no call listing every reader group (no segstore admin extension); reader-group describe SCOPE/GROUP finds any "
    "group"
)
_UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000))
_UNITS_BYTES = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


# ---- formatting --------------------------------------------------------------------------------------------------
def format_count(value: int) -> str:
    """``1234567`` -> ``1,234,567``."""
    return f"{value:,}"


def format_bytes(value: int) -> str:
    """``10485760`` -> ``10,485,760 bytes (10.0 MiB)``; below 1 KiB just the bytes."""
    for unit, size in _UNITS_BYTES:
        if value >= size:
            return f"{value:,} bytes ({value / size:.1f} {unit})"
    return f"{value:,} bytes"


def format_duration_ms(value: int) -> str:
    """``604800000`` -> ``7d``, ``5400000`` -> ``1h30m``, ``1500`` -> ``1500ms``, ``0`` -> ``0``."""
    if value == 0:
        return "0"
    parts: list[str] = []
    rest = value
    for unit, size in _UNITS_MS:
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    if rest:
        return f"{value}ms"
    return "".join(parts)


def format_time_ms(value: int) -> str:
    """Milliseconds since 1970 -> ``2026-05-01T12:00:00.000Z``."""
    moment = datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_range(key_range: tuple[float, float] | None) -> str:
    """``(0.0, 0.5)`` -> ``[0, 0.5)``; None -> ``-``."""
    return "-" if key_range is None else f"[{key_range[0]:.4g}, {key_range[1]:.4g})"


def format_cut(cut: Cut | None, empty: str) -> str:
    """``{0: 512, 1: 0}`` -> ``0=512, 1=0`` (what ``--cut`` takes); ``empty`` for a cut without positions."""
    if not cut:
        return empty
    return ", ".join(f"{segment_label(s)}={offset}" for s, offset in sorted(cut.items()))


def format_scaling(policy: ScalingPolicy) -> str:
    """``fixed, min 3 segments`` or ``by rate: 100 events/s per segment, factor 2, min 3 segments``."""
    segments = f"{policy.min_num_segments} segment{'s' if policy.min_num_segments != 1 else ''}"
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return f"fixed, min {segments}"
    rate = "events/s" if policy.scale_type == ScaleType.BY_RATE_IN_EVENTS_PER_SEC else "KiB/s"
    return f"by rate: {policy.target_rate} {rate} per segment, factor {policy.scale_factor}, min {segments}"


def format_retention(policy: RetentionPolicy | None) -> str:
    """``none``, ``time: at least 7d``, ``size: at least 10,485,760 bytes (10.0 MiB), at most ...``."""
    if policy is None:
        return "none"
    if policy.retention_type == RetentionType.TIME:
        text = f"time: at least {format_duration_ms(policy.retention_param)}"
        return text + (f", at most {format_duration_ms(policy.retention_max)}" if policy.retention_max else "")
    text = f"size: at least {format_bytes(policy.retention_param)}"
    return text + (f", at most {format_bytes(policy.retention_max)}" if policy.retention_max else "")


def _title(text: str) -> Text:
    return Text(text, style="bold")


def _table(*headers: str) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for header in headers:
        table.add_column(header, no_wrap=True)
    return table


def _grid(rows: Sequence[tuple[str, str]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for key, value in rows:
        grid.add_row(key, value)
    return grid


# ---- JSON --------------------------------------------------------------------------------------------------------
def dumps(view: object) -> str:
    """The view as an indented JSON document."""
    return json.dumps(to_json(view), indent=2)


def segment_json(scope: str, stream: str, segment_id: int) -> dict[str, object]:
    """How JSON names a segment: ``{"segment": "3.#epoch.1", "segment_id": ..., "name": "scope/stream/..."}``."""
    return {
        "segment": segment_label(segment_id),
        "segment_id": segment_id,
        "name": qualified_segment_name(scope, stream, segment_id),
    }


def cut_json(cut: Cut | None) -> list[dict[str, object]] | None:
    """A stream cut as ``[{"segment": "0", "segment_id": 0, "offset": 512}, ...]`` (None stays None)."""
    if cut is None:
        return None
    return [{"segment": segment_label(s), "segment_id": s, "offset": o} for s, o in sorted(cut.items())]


def config_json(config: StreamConfiguration) -> dict[str, object]:
    scaling = config.scaling
    retention = config.retention
    return {
        "scaling": {
            "type": ScaleType(scaling.scale_type).name,
            "target_rate": scaling.target_rate,
            "scale_factor": scaling.scale_factor,
            "min_segments": scaling.min_num_segments,
        },
        "retention": None
        if retention is None
        else {
            "type": RetentionType(retention.retention_type).name,
            "min": retention.retention_param,
            "max": retention.retention_max or None,
        },
        "tags": list(config.tags),
        "timestamp_aggregation_timeout_ms": config.timestamp_aggregation_timeout_ms,
        "rollover_size_bytes": config.rollover_size_bytes,
    }


def _segment_view_json(scope: str, stream: str, view: SegmentView, active: bool) -> dict[str, object]:
    return {
        **segment_json(scope, stream, view.segment_id),
        "key_range": list(view.key_range) if view.key_range is not None else None,
        "state": segment_state(active, sealed=False),
        "start_offset": view.start_offset,
        "length": view.length,
        "retained_bytes": view.retained_bytes,
        "endpoint": view.endpoint,
    }


def _epoch_json(scope: str, stream: str, epoch: EpochView) -> dict[str, object]:
    return {
        "epoch": epoch.epoch,
        "segments": [
            {**segment_json(scope, stream, s), "key_range": list(r)} for s, r in sorted(epoch.segments.items())
        ],
        "sealed": [segment_label(s) for s in epoch.sealed],
        "created": [segment_label(s) for s in epoch.created],
    }


@singledispatch
def to_json(view: object) -> object:
    """The view as plain JSON values."""
    raise TypeError(f"no JSON form for {type(view).__name__}")


@to_json.register
def _(view: Names) -> object:
    if view.kind == "scopes":
        return {"scopes": list(view.names)}
    return {"scope": view.scope, "streams": list(view.names)}


@to_json.register
def _(view: Outcome) -> object:
    details: dict[str, object] = {}
    for key, value in view.details.items():
        if key == "cut" and isinstance(value, Mapping):
            details[key] = cut_json(value)
        elif key == "sealed" and isinstance(value, Sequence):
            details[key] = [segment_label(s) for s in value]
        elif key == "created" and isinstance(value, Mapping):
            details[key] = [{"segment": segment_label(s), "key_range": list(r)} for s, r in sorted(value.items())]
        else:
            details[key] = value
    note = {"note": view.note} if view.note else {}
    return {"action": view.action, "target": view.target, "changed": view.changed, **details, **note}


@to_json.register
def _(view: StreamView) -> object:
    scope, stream = view.scope, view.stream
    active = {s.segment_id for s in view.active} if not view.sealed else set()
    return {
        "scope": scope,
        "stream": stream,
        "state": SEALED if view.sealed else ACTIVE,
        "sealed": view.sealed,
        "epoch": view.current_epoch,
        "config": config_json(view.config),
        "segments": [_segment_view_json(scope, stream, s, s.segment_id in active) for s in view.active],
        "retained_segments": [_segment_view_json(scope, stream, s, s.segment_id in active) for s in view.retained],
        "head": cut_json(view.head),
        "tail": cut_json(view.tail),
        "retained_bytes": view.retained_bytes,
        "subscribers": list(view.subscribers),
        "history": [_epoch_json(scope, stream, e) for e in view.history],
    }


@to_json.register
def _(view: ReaderGroupList) -> object:
    groups = [
        {"scope": g.scope, "name": g.name, "streams": list(g.streams), "retention": g.retention} for g in view.groups
    ]
    listing = {"scope": view.scope, "reader_groups": groups, "complete": view.complete}
    if not view.complete:
        return {**listing, "note": GROUP_LISTING_NOTE}
    return {**listing, "hidden": view.hidden}


@to_json.register
def _(view: ReaderGroupView) -> object:
    return {
        "scope": view.scope,
        "name": view.name,
        "id": view.group_id,
        "generation": view.generation,
        "retention": view.retention,
        "group_refresh_time_ms": view.refresh_ms,
        "automatic_checkpoint_interval_ms": view.checkpoint_interval_ms,
        "max_outstanding_checkpoint_request": view.max_outstanding_checkpoints,
        "streams": [
            {"stream": s.stream, "start": cut_json(s.start), "end": cut_json(s.end), "subscribed": s.subscribed}
            for s in view.streams
        ],
        "readers": None
        if view.positions is None
        else [
            {
                "reader": p.reader,
                **segment_json(p.scope, p.stream, p.segment_id),
                "offset": p.offset,
                "lag_bytes": p.lag_bytes,
            }
            for p in view.positions
        ],
        **({"note": READER_POSITIONS_NOTE} if view.positions is None else {}),
    }


@to_json.register
def _(view: SegmentInfoView) -> object:
    return {
        **segment_json(view.scope, view.stream, view.segment_id),
        "scope": view.scope,
        "stream": view.stream,
        "key_range": list(view.key_range) if view.key_range is not None else None,
        "start_offset": view.start_offset,
        "length": view.length,
        "state": view.state,
        "sealed": view.sealed,
        "last_modified_ms": view.last_modified_ms,
        "endpoint": view.endpoint,
    }


@to_json.register
def _(view: ControllersView) -> object:
    return {"controllers": list(view.endpoints)}


# ---- tables ------------------------------------------------------------------------------------------------------
@singledispatch
def to_human(view: object) -> list[RenderableType]:
    """The view as lines and tables for a terminal."""
    raise TypeError(f"no table form for {type(view).__name__}")


@to_human.register
def _(view: Names) -> list[RenderableType]:
    if not view.names:
        return [Text("no scopes" if view.kind == "scopes" else f"no streams in scope {view.scope}")]
    table = _table("SCOPE" if view.kind == "scopes" else "STREAM")
    for name in view.names:
        table.add_row(name)
    return [table]


def _some(items: Sequence[str], most: int = 6) -> str:
    """Up to ``most`` items joined by commas; more as the first and the last and how many in all."""
    if len(items) <= most:
        return ", ".join(items)
    return f"{len(items)} segments: {items[0]} ... {items[-1]}"


def _outcome_details(view: Outcome) -> str:
    parts: list[str] = []
    details = view.details
    segments = details.get("segments")
    if isinstance(segments, int):
        parts.append(f"{segments} segment{'s' if segments != 1 else ''}")
    cut = details.get("cut")
    if isinstance(cut, Mapping):
        parts.append(f"at {format_cut(cut, 'the head')}")
    sealed = details.get("sealed")
    if isinstance(sealed, Sequence):
        parts.append("sealed " + _some([segment_label(s) for s in sealed]))
    created = details.get("created")
    if isinstance(created, Mapping):
        parts.append("created " + _some([f"{segment_label(s)} {format_range(r)}" for s, r in sorted(created.items())]))
    if "epoch" in details:
        parts.append(f"epoch {details['epoch']}")
    if view.note:
        parts.append(view.note)
    return f" ({'; '.join(parts)})" if parts else ""


_ACTION_WORDS = {"exists": "exists already", "already-sealed": "was sealed already", "scale-started": "scale started"}


@to_human.register
def _(view: Outcome) -> list[RenderableType]:
    action = _ACTION_WORDS.get(view.action, view.action)
    return [Text(f"{view.target} {action}{_outcome_details(view)}")]


def _segments_table(view: StreamView) -> Table:
    active = {s.segment_id for s in view.active} if not view.sealed else set()
    table = _table("SEGMENT", "KEY RANGE", "STATE", "START", "LENGTH", "BYTES", "ENDPOINT")
    shown = {s.segment_id: s for s in view.retained} | {s.segment_id: s for s in view.active}
    for segment_id in sorted(shown):
        s = shown[segment_id]
        state = segment_state(segment_id in active, sealed=False)
        table.add_row(
            segment_label(segment_id),
            format_range(s.key_range),
            state,
            format_count(s.start_offset),
            format_count(s.length),
            format_count(s.retained_bytes),
            s.endpoint,
        )
    return table


def _history_table(view: StreamView) -> Table:
    table = _table("EPOCH", "SEGMENTS", "SEALED", "CREATED")
    for epoch in view.history:
        created = ", ".join(f"{segment_label(s)} {format_range(epoch.segments[s])}" for s in epoch.created)
        sealed = ", ".join(segment_label(s) for s in epoch.sealed) or "-"
        table.add_row(str(epoch.epoch), str(len(epoch.segments)), sealed, created or "-")
    return table


@to_human.register
def _(view: StreamView) -> list[RenderableType]:
    config = view.config
    state = SEALED if view.sealed else ACTIVE
    retained = len({s.segment_id for s in view.retained})
    summary = _grid(
        [
            ("scaling", format_scaling(config.scaling)),
            ("retention", format_retention(config.retention)),
            ("tags", ", ".join(config.tags) or "-"),
            ("size", f"{format_bytes(view.retained_bytes)} from head to tail, in {retained} segment(s)"),
            ("head", format_cut(view.head, "the start of the stream")),
            ("tail", format_cut(view.tail, "-")),
            ("subscribers", ", ".join(view.subscribers) or "-"),
        ]
    )
    first = view.history[0].epoch if view.history else 0
    return [
        _title(f"stream {view.scope}/{view.stream}: {state}, epoch {view.current_epoch}"),
        summary,
        Text(""),
        _title("segments"),
        _segments_table(view),
        Text(""),
        _title(f"scale history (epochs {first}-{view.current_epoch})"),
        _history_table(view),
    ]


@to_human.register
def _(view: ReaderGroupList) -> list[RenderableType]:
    notes: list[RenderableType] = []
    if not view.complete:
        notes.append(Text(f"note: {GROUP_LISTING_NOTE}", style="dim"))
    if view.hidden:
        notes.append(Text(f"note: {view.hidden} more in scope {view.scope} that you may not see", style="dim"))
    if not view.groups:
        found = "no reader groups in" if view.complete else "no reader group subscribes to a stream of"
        return [Text(f"{found} scope {view.scope}"), *notes]
    table = _table("READER GROUP", "RETENTION", "STREAMS") if view.complete else _table("READER GROUP", "STREAMS")
    for group in view.groups:
        retention = [group.retention or "-"] if view.complete else []
        table.add_row(f"{group.scope}/{group.name}", *retention, ", ".join(group.streams))
    return [table, *notes]


@to_human.register
def _(view: ReaderGroupView) -> list[RenderableType]:
    checkpoints = (
        "off"
        if view.checkpoint_interval_ms < 0
        else f"every {format_duration_ms(view.checkpoint_interval_ms)}, at most {view.max_outstanding_checkpoints} "
        "outstanding"
    )
    summary = _grid(
        [
            ("id", view.group_id),
            ("generation", str(view.generation)),
            ("retention", view.retention),
            ("refresh", format_duration_ms(view.refresh_ms)),
            ("checkpoints", checkpoints),
        ]
    )
    table = _table("STREAM", "START", "END", "SUBSCRIBED")
    for stream in view.streams:
        subscribed = "yes" if stream.subscribed else "no"
        table.add_row(stream.stream, format_cut(stream.start, "head"), format_cut(stream.end, "tail"), subscribed)
    shown: list[RenderableType] = [_title(f"reader group {view.scope}/{view.name}"), summary, Text(""), table]
    if view.positions is None:
        return [*shown, Text(f"note: {READER_POSITIONS_NOTE}", style="dim")]
    readers = _table("READER", "SEGMENT", "OFFSET", "LAG (bytes)")
    for p in view.positions:
        label = f"{p.scope}/{p.stream}/{segment_label(p.segment_id)}"
        readers.add_row(p.reader or "(unassigned)", label, f"{p.offset:,}", f"{p.lag_bytes:,}")
    return [*shown, Text(""), readers]


@to_human.register
def _(view: SegmentInfoView) -> list[RenderableType]:
    rows = [
        ("segment", f"{segment_label(view.segment_id)} (id {view.segment_id})"),
        ("key range", format_range(view.key_range) if view.key_range is not None else "- (not active)"),
        ("state", view.state),
        ("start", format_count(view.start_offset)),
        ("length", format_count(view.length)),
        ("bytes", format_bytes(view.length - view.start_offset)),
        ("last change", format_time_ms(view.last_modified_ms)),
        ("endpoint", view.endpoint),
    ]
    return [_title(view.name), _grid(rows)]


@to_human.register
def _(view: ControllersView) -> list[RenderableType]:
    table = _table("CONTROLLER")
    for endpoint in view.endpoints:
        table.add_row(endpoint)
    return [table]


def to_text(view: object, width: int = 200) -> str:
    """The tables of :func:`to_human` as plain text without colours or trailing blanks (pipes, files, tests)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, soft_wrap=False)
    for renderable in to_human(view):
        console.print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
