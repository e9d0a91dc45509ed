"""The scope and stream commands that list and change: ``scope list|create|delete``, ``stream list|create|seal|
delete|truncate|scale``. ``stream describe`` is in :mod:`.describe`.

Every command takes the session, the parsed arguments and an :class:`~.progress.Activity`, and returns a view
(:mod:`.views`). A command on a stream first asks the controller whether it exists, so a missing one is
reported as ``stream scope/name does not exist`` (exit code 1) whatever call would have failed next.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from controller_client.errors import ScopeNotEmptyError, ScopeNotFoundError, StreamNotFoundError
from controller_client.model import (
    InvalidModelError,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    even_ranges,
)
from segstore_cli.admin.connection import Session
from segstore_cli.admin.errors import EXIT_USAGE, AdminError
from segstore_cli.admin.extension import NoAdminExtensionError, scope_contents
from segstore_cli.admin.parsing import segment_label
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.views import Names, Outcome

SCALE_POLL_S = 0.2
SNAP = 1e-4
"""Typed key boundaries this close to a boundary of the sealed segments are taken as that boundary (ranges are
shown with 4 significant digits; the controller wants the exact keys)."""


async def require_stream(session: Session, scope: str, stream: str) -> None:
    """Raise StreamNotFoundError (ScopeNotFoundError for a missing scope) unless ``scope/stream`` exists."""
    if not await session.controller.stream_exists(scope, stream):
        if not await session.controller.scope_exists(scope):
            raise ScopeNotFoundError(scope)
        raise StreamNotFoundError(scope, stream)


async def is_sealed(session: Session, scope: str, stream: str) -> bool:
    """Whether the stream is sealed. A Pravega controller answers a sealed stream's ``getCurrentSegments`` with
    no segments; segstore's with those it was sealed with, which ``isSegmentValid`` then calls not valid."""
    active = await session.controller.get_current_segments(scope, stream)
    return not active or not await session.controller.is_segment_valid(scope, stream, active[0].segment_id)


# ---- scopes ------------------------------------------------------------------------------------------------------
async def list_scopes(session: Session, args: argparse.Namespace, activity: Activity) -> Names:
    """Every scope the caller may see."""
    return Names("scopes", tuple(await session.manager.list_scopes()))


async def create_scope(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Create a scope; nothing changes if it exists."""
    created = await session.manager.create_scope(args.scope)
    return Outcome("created" if created else "exists", f"scope {args.scope}", created)


async def delete_scope(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Delete an empty scope. Raises ScopeNotFoundError, AdminError naming what the scope still holds."""
    if not await session.controller.scope_exists(args.scope):
        raise ScopeNotFoundError(args.scope)
    try:
        await session.controller.delete_scope(args.scope)
    except ScopeNotEmptyError:
        raise AdminError(await not_empty(session, args.scope)) from None
    return Outcome("deleted", f"scope {args.scope}")


_HOW_TO_DELETE = {
    "streams": "segstore admin stream delete SCOPE/STREAM --seal",
    "reader_groups": "segstore admin reader-group delete SCOPE/GROUP",
    "key_value_tables": "StreamManager.delete_key_value_table of the client library",
}
MOST_NAMES = 10
"""At most this many names of each kind in the line that says why a scope is not empty."""


async def not_empty(session: Session, scope: str) -> str:
    """Why ``scope`` cannot be deleted, naming what it holds (segstore's admin extension ``ScopeContents``), each
    kind with how to delete it: ``scope shop is not empty: reader groups shop/audit, shop/billing (segstore admin
    reader-group delete SCOPE/GROUP)``."""
    try:
        contents = await scope_contents(session, scope)
    except NoAdminExtensionError:
        return f"scope {scope} is not empty: delete its streams, reader groups and key-value tables first"
    parts = []
    for kind, names in (
        ("streams", contents.streams),
        ("reader_groups", contents.reader_groups),
        ("key_value_tables", contents.key_value_tables),
    ):
        shown = [f"{scope}/{name}" for name in names[:MOST_NAMES]]
        if len(names) > MOST_NAMES:
            shown.append(f"{len(names) - MOST_NAMES} more")
        if contents.hidden.get(kind):
            shown.append(f"{contents.hidden[kind]} you may not see")
        if shown:
            parts.append(f"{kind.replace('_', ' ')} {', '.join(shown)} ({_HOW_TO_DELETE[kind]})")
    if not parts:  # emptied since the controller refused
        return f"scope {scope} was not empty a moment ago (something was being created or deleted): try again"
    return f"scope {scope} is not empty: {'; '.join(parts)}"


# ---- streams -----------------------------------------------------------------------------------------------------
async def list_streams(session: Session, args: argparse.Namespace, activity: Activity) -> Names:
    """The streams of a scope (with ``--tag``: those tagged so). Raises ScopeNotFoundError."""
    return Names("streams", tuple(await session.manager.list_streams(args.scope, args.tag)), scope=args.scope)


def stream_configuration(args: argparse.Namespace) -> StreamConfiguration:
    """The configuration ``stream create`` asks for. Raises AdminError (exit 2) for options that do not fit."""
    try:
        if args.events_per_second is not None and args.kbytes_per_second is not None:
            raise AdminError("--events-per-second and --kbytes-per-second exclude each other", EXIT_USAGE)
        if args.events_per_second is not None:
            scaling = ScalingPolicy.by_event_rate(args.events_per_second, args.scale_factor, args.segments)
        elif args.kbytes_per_second is not None:
            scaling = ScalingPolicy.by_data_rate(args.kbytes_per_second, args.scale_factor, args.segments)
        else:
            scaling = ScalingPolicy.fixed(args.segments)
        if args.retention_time is not None and args.retention_size is not None:
            raise AdminError("--retention-time and --retention-size exclude each other", EXIT_USAGE)
        retention = None
        if args.retention_time is not None:
            retention = RetentionPolicy.by_time_ms(args.retention_time)
        elif args.retention_size is not None:
            retention = RetentionPolicy.by_size_bytes(args.retention_size)
        return StreamConfiguration(scaling, retention, tags=tuple(args.tag or ()))
    except InvalidModelError as e:
        raise AdminError(str(e), EXIT_USAGE) from None


async def create_stream(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Create a stream; an existing one is left as it is. Raises ScopeNotFoundError."""
    scope, stream = args.stream
    config = stream_configuration(args)
    created = await session.manager.create_stream(scope, stream, config)
    if not created:
        return Outcome("exists", f"stream {scope}/{stream}", False, note="its configuration is left as it was")
    return Outcome("created", f"stream {scope}/{stream}", details={"segments": config.scaling.min_num_segments})


async def seal_stream(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Seal a stream: writers are refused from now on, readers end after its last event."""
    scope, stream = args.stream
    await require_stream(session, scope, stream)
    if await is_sealed(session, scope, stream):
        return Outcome("already-sealed", f"stream {scope}/{stream}", changed=False)
    with activity.step(f"sealing {scope}/{stream}"):
        await session.manager.seal_stream(scope, stream)
    return Outcome("sealed", f"stream {scope}/{stream}")


async def delete_stream(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Delete a sealed stream and all its data (with ``--seal``: seal it first)."""
    scope, stream = args.stream
    await require_stream(session, scope, stream)
    if not await is_sealed(session, scope, stream):
        if not args.seal:
            raise AdminError(
                f"stream {scope}/{stream} is not sealed: seal it first (segstore admin stream seal "
                f"{scope}/{stream}) or pass --seal"
            )
        with activity.step(f"sealing {scope}/{stream}"):
            await session.manager.seal_stream(scope, stream)
    with activity.step(f"deleting {scope}/{stream} and its segments"):
        await session.manager.delete_stream(scope, stream)
    return Outcome("deleted", f"stream {scope}/{stream}")


async def truncation_cut(session: Session, args: argparse.Namespace) -> StreamCut:
    """The cut ``stream truncate`` was given: the tail, the first events at a time, or one typed in."""
    scope, stream = args.stream
    if args.tail:
        return await session.manager.tail_cut(scope, stream)
    if args.time is not None:
        return await session.manager.cut_at_time(scope, stream, args.time)
    return StreamCut(scope, stream, args.cut)


async def truncate_stream(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Drop everything before a stream cut (``--tail``: all written so far)."""
    scope, stream = args.stream
    await require_stream(session, scope, stream)
    cut = await truncation_cut(session, args)
    if not await session.controller.is_stream_cut_valid(cut):
        shown = ", ".join(f"{segment_label(s)}={o}" for s, o in sorted(cut.positions.items()))
        raise AdminError(f"stream {scope}/{stream}: {shown} is not a valid stream cut of it (see stream describe)")
    with activity.step(f"truncating {scope}/{stream}"):
        await session.manager.truncate(cut)
    return Outcome("truncated", f"stream {scope}/{stream}", details={"cut": dict(cut.positions)})


async def scale_request(session: Session, args: argparse.Namespace) -> tuple[list[int], list[tuple[float, float]]]:
    """The segments to seal and the key ranges to create: ``--to N`` (every active segment, N even ranges) or
    ``--seal``/``--ranges`` as typed (checked against the active segments)."""
    scope, stream = args.stream
    if await is_sealed(session, scope, stream):
        raise AdminError(f"stream {scope}/{stream} is sealed: it cannot scale")
    active = await session.controller.get_current_segments(scope, stream)
    if args.to is not None:
        return [s.segment_id for s in active], even_ranges(args.to)
    by_id = {s.segment_id: s for s in active}
    missing = [segment_label(s) for s in args.seal if s not in by_id]
    if missing:
        current = ", ".join(segment_label(s) for s in by_id)
        raise AdminError(f"stream {scope}/{stream}: segment {', '.join(missing)} is not active (active: {current})")
    sealed = [(by_id[s].key_start, by_id[s].key_end) for s in args.seal]
    ranges = fit_ranges(sealed, args.ranges)
    if ranges is None:
        keys = ", ".join(f"[{a:.4g}, {b:.4g})" for a, b in merge_ranges(sealed))
        labels = ", ".join(segment_label(s) for s in args.seal)
        raise AdminError(f"stream {scope}/{stream}: --ranges must cover exactly the keys of {labels}: {keys}")
    config = await session.controller.get_stream_configuration(scope, stream)
    remaining = len(active) - len(sealed) + len(ranges)
    if remaining < config.scaling.min_num_segments:
        raise AdminError(
            f"stream {scope}/{stream}: {remaining} segment(s) would remain, fewer than its scaling "
            f"policy's minimum of {config.scaling.min_num_segments}"
        )
    return list(args.seal), ranges


def merge_ranges(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Key ranges joined where one ends where the next starts, in order."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(ranges):
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def fit_ranges(
    sealed: list[tuple[float, float]], ranges: list[tuple[float, float]]
) -> list[tuple[float, float]] | None:
    """``ranges`` with each boundary within :data:`SNAP` of a boundary of ``sealed`` moved onto it, if they then
    cover exactly the keys of ``sealed``; None if they do not."""
    edges = sorted({edge for pair in sealed for edge in pair})

    def snap(value: float) -> float:
        nearest = min(edges, key=lambda edge: abs(edge - value))
        return nearest if abs(nearest - value) <= SNAP else value

    fitted = [(snap(start), snap(end)) for start, end in ranges]
    if any(start >= end for start, end in fitted) or merge_ranges(fitted) != merge_ranges(sealed):
        return None
    return fitted


async def scale_stream(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Replace segments by new ones over the same key space and wait until the controller has done it (unless
    ``--no-wait``). Raises ScalePreconditionFailedError (the ranges do not cover the sealed segments exactly,
    or another scale runs), AdminError when it is not done within ``--wait-timeout``."""
    scope, stream = args.stream
    await require_stream(session, scope, stream)
    sealed, ranges = await scale_request(session, args)
    started = await session.controller.scale(scope, stream, sealed, ranges, int(time.time() * 1000))
    details: dict[str, object] = {
        "epoch": started.epoch + 1,
        "sealed": sealed,
        "created": {s.segment_id: (s.key_start, s.key_end) for s in started.new_segments},
    }
    if args.no_wait:
        note = "not waited for: see stream describe"
        return Outcome("scale-started", f"stream {scope}/{stream}", details={**details, "done": False}, note=note)
    what = f"scaling {scope}/{stream}: {len(sealed)} segment(s) into {len(ranges)}, epoch {started.epoch + 1}"
    with activity.step(what):
        await _wait_for_scale(session, scope, stream, started.epoch, args.wait_timeout)
    return Outcome("scaled", f"stream {scope}/{stream}", details={**details, "done": True})


async def _wait_for_scale(session: Session, scope: str, stream: str, epoch: int, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not await session.controller.check_scale(scope, stream, epoch):
                await asyncio.sleep(SCALE_POLL_S)
    except TimeoutError:
        raise AdminError(
            f"stream {scope}/{stream}: the scale to epoch {epoch + 1} is not done after {timeout_s:g}s; it goes on "
            "in the controller (see stream describe)"
        ) from None
