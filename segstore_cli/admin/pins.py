"""``pins``: the live chunk pins of every segment container (readers' holds on Tier-2 chunk files).

A history read (``pravega_spark.history``) or any reader that was given chunk files pins them so that garbage
collection and compaction leave them in place until it is done (``segment_store.storage.chunk_pins``). This asks
the controller which segment store runs which container (the admin extension, as ``containers`` does) and each
segment store for its containers' pins (segstore's wire extension ``ListChunkPins``).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from segstore_cli.admin.connection import Session
from segstore_cli.admin.extension import admin_extension
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.render import _table, to_human, to_json


@dataclass(frozen=True, slots=True)
class PinRow:
    container_id: int
    pin_id: str
    segment: str
    chunk_count: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class PinsView:
    pins: tuple[PinRow, ...]
    now_ms: int


async def list_pins(session: Session, args: argparse.Namespace, activity: Activity) -> PinsView:
    """Every live pin of every assigned container, soonest expiry first."""
    found = await admin_extension(session, "ContainerAssignment", {})
    rows: list[PinRow] = []
    for host, ids in sorted(found["hosts"].items()):
        address, _, port = str(host).rpartition(":")
        for container_id in ids:
            listed = await session.manager.client.list_chunk_pins(int(container_id), (address, int(port)))
            rows += [PinRow(int(container_id), p.pin_id, p.segment, p.chunk_count, p.expires_at_ms) for p in listed]
    rows.sort(key=lambda r: (r.expires_at_ms, r.container_id, r.segment))
    return PinsView(tuple(rows), int(time.time() * 1000))


@to_json.register
def _(view: PinsView) -> object:
    return [
        {
            "container": r.container_id,
            "pin_id": r.pin_id,
            "segment": r.segment,
            "chunks": r.chunk_count,
            "expires_at_ms": r.expires_at_ms,
        }
        for r in view.pins
    ]


@to_human.register
def _(view: PinsView) -> list[RenderableType]:
    if not view.pins:
        return [Text("no live chunk pins")]
    table = _table("CONTAINER", "PIN", "SEGMENT", "CHUNKS", "EXPIRES IN (s)")
    for r in view.pins:
        left = max(r.expires_at_ms - view.now_ms, 0) / 1000
        table.add_row(str(r.container_id), r.pin_id, r.segment, str(r.chunk_count), f"{left:.1f}")
    return [table]
