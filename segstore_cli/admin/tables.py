"""``tables``: the Apache Iceberg table of every opted-in stream (docs/iceberg.md, "Operating tables").

Asks the controller which segment stores run containers (the admin extension, as ``pins`` does) and each of
them what its table maintainer knows (segstore's wire extension ``ListIcebergTables``). A stream's segments
may be spread over several segment stores: each one registers its own segments' chunk files, so a table's row
merges their views: the newest snapshot (and its file count), the lag summed over them (its age: the oldest),
failures from whichever store fails. Lag definitions: ``segment_store.iceberg.status``.
"""

from __future__ import annotations

import argparse
import datetime
import time
from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from segment_store.protocol import IcebergTableInfo
from segstore_cli.admin.connection import Session
from segstore_cli.admin.extension import admin_extension
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.render import _table, to_human, to_json

NONE_CONFIGURED = "no Iceberg tables: the segment stores run without --iceberg-tables (docs/iceberg.md)"
STALE_AFTER_MS = 120_000
"""A segment store whose last pass over a table is older than this is *stale*: its maintainer stopped making passes
(a pass hangs, e.g. on a catalog that never answers). Passes start every commit interval, and at least every
``retry_max_delay_ms`` (30 s by default) after the last one while a catalog fails: a working maintainer's last pass
is older than this only while one pass takes over 90 s."""


@dataclass(frozen=True, slots=True)
class TableRow:
    """One table, merged over the segment stores that keep part of it."""

    table: str
    snapshot_id: int | None
    committed_at_ms: int | None
    data_files: int
    lag_bytes: int
    lag_chunks: int
    lag_age_ms: int
    failures: int
    failed_passes: int
    last_error: str
    passed: bool
    """Some segment store made a pass over it (else: waiting for the first)."""
    segment_stores: tuple[str, ...]
    last_pass_age_ms: int | None = None
    """How long ago the segment store with the oldest last pass made it (None before any pass)."""
    stale: tuple[str, ...] = ()
    """The segment stores whose last pass is older than :data:`STALE_AFTER_MS`."""

    @property
    def state(self) -> str:
        if self.failures:
            return f"failing ({self.failures} passes): {self.last_error}"
        if self.stale:
            assert self.last_pass_age_ms is not None
            where = f" on {', '.join(self.stale)}" if len(self.segment_stores) > 1 else ""
            return f"stale: no pass for {self.last_pass_age_ms / 1000:.0f} s{where} (a pass hangs?)"
        return "ok" if self.passed else "waiting for the first pass"

    @property
    def state_word(self) -> str:
        """The state in one word (JSON): failing, stale, ok or waiting."""
        return "failing" if self.failures else "stale" if self.stale else "ok" if self.passed else "waiting"


@dataclass(frozen=True, slots=True)
class TablesView:
    enabled: bool
    tables: tuple[TableRow, ...]


async def list_tables(session: Session, args: argparse.Namespace, activity: Activity) -> TablesView:
    """Every table any segment store keeps, by name."""
    found = await admin_extension(session, "ContainerAssignment", {})
    enabled = False
    seen: dict[str, list[tuple[str, IcebergTableInfo]]] = {}
    for host in sorted(found["hosts"]):
        address, _, port = str(host).rpartition(":")
        on, infos = await session.manager.client.list_iceberg_tables((address, int(port)))
        enabled |= on
        for info in infos:
            seen.setdefault(info.table, []).append((str(host), info))
    now_ms = int(time.time() * 1000)
    return TablesView(enabled, tuple(_merge(name, views, now_ms) for name, views in sorted(seen.items())))


def _merge(name: str, views: list[tuple[str, IcebergTableInfo]], now_ms: int) -> TableRow:
    newest = max((info for _, info in views), key=lambda i: i.committed_at_ms)
    failing = [(host, info) for host, info in views if info.failures]
    error = "; ".join(f"{host}: {info.last_error}" if len(views) > 1 else info.last_error for host, info in failing)
    ages = {host: max(now_ms - info.last_pass_at_ms, 0) for host, info in views if info.last_pass_at_ms > 0}
    return TableRow(
        table=name,
        snapshot_id=None if newest.snapshot_id == -1 else newest.snapshot_id,
        committed_at_ms=None if newest.committed_at_ms == -1 else newest.committed_at_ms,
        data_files=newest.data_files,
        lag_bytes=sum(info.lag_bytes for _, info in views),
        lag_chunks=sum(info.lag_chunks for _, info in views),
        lag_age_ms=max(info.lag_age_ms for _, info in views),
        failures=max(info.failures for _, info in views),
        failed_passes=sum(info.failed_passes for _, info in views),
        last_error=error,
        passed=bool(ages),
        segment_stores=tuple(host for host, _ in views),
        last_pass_age_ms=max(ages.values()) if ages else None,
        stale=tuple(host for host, age in ages.items() if age > STALE_AFTER_MS),
    )


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@to_json.register
def _(view: TablesView) -> object:
    return {
        "enabled": view.enabled,
        "tables": [
            {
                "table": r.table,
                "snapshot_id": r.snapshot_id,
                "committed_at_ms": r.committed_at_ms,
                "data_files": r.data_files,
                "lag_bytes": r.lag_bytes,
                "lag_chunks": r.lag_chunks,
                "lag_age_ms": r.lag_age_ms,
                "failures": r.failures,
                "failed_passes": r.failed_passes,
                "last_error": r.last_error,
                "state": r.state_word,
                "last_pass_age_ms": r.last_pass_age_ms,
                "segment_stores": list(r.segment_stores),
            }
            for r in view.tables
        ],
    }


@to_human.register
def _(view: TablesView) -> list[RenderableType]:
    if not view.enabled:
        return [Text(NONE_CONFIGURED)]
    if not view.tables:
        return [Text("no Iceberg tables yet: no opted-in stream has chunk files in Tier-2")]
    table = _table("TABLE", "SNAPSHOT", "COMMITTED AT", "FILES", "LAG (bytes)", "LAG AGE (s)", "STATE")
    for r in view.tables:
        snapshot = "-" if r.snapshot_id is None else str(r.snapshot_id)
        table.add_row(r.table, snapshot, _when(r.committed_at_ms), str(r.data_files), str(r.lag_bytes),
                      f"{r.lag_age_ms / 1000:.1f}", Text(r.state))  # fmt: skip
    return [table]
