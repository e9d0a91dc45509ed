"""Configuration of the Iceberg table maintainer: which streams are tables, which catalog holds them, how often
the tables are brought up to date and how much history they keep."""

from __future__ import annotations

import argparse
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"[A-Za-z0-9_.\-*]+")


@dataclass(frozen=True, slots=True)
class IcebergConfig:
    """Streams as Iceberg tables (``--iceberg-tables`` and the ``--iceberg-*`` flags of ``segstore segmentstore``
    and ``segstore standalone``; docs/iceberg.md).

    ``tables`` are ``scope/stream`` patterns (``*`` matches any run of characters within a name, e.g.
    ``"sales/*"``); a stream is a table when any pattern matches it. Internal scopes (starting with ``_``) never
    match. ``catalog`` names a catalog configured the pyiceberg way (``~/.pyiceberg.yaml`` or
    ``PYICEBERG_CATALOG__<NAME>__<PROPERTY>`` environment variables: any pyiceberg catalog, REST, Glue, Hive, SQL);
    None: the SQL catalog on SQLite under ``<data dir>/iceberg`` (``catalog.db``, metadata under ``warehouse/``).
    """

    tables: tuple[str, ...]
    data_dir: Path
    catalog: str | None = None
    commit_interval_ms: int = 500
    """Pause between two passes that register new chunk files (one commit per table with news per pass)."""
    flush_max_age_ms: int = 1000
    """With tables on, the storage writer flushes a segment's appends to a chunk at least this often (its
    ``flush_max_age_s``): with the commit interval, what bounds how soon an acknowledged event is in its table."""
    keep_snapshots: int = 10
    """Snapshots kept per table: older ones expire (every ``expire_every_commits`` commits); time travel reaches
    the kept ones, and the chunk files of every kept snapshot are pinned."""
    expire_every_commits: int = 10
    pin_ttl_ms: int = 6 * 3600 * 1000
    """Life of the pins holding the tables' chunk files (renewed at half life while the maintainer runs)."""
    retry_max_delay_ms: int = 30_000
    """Longest pause between attempts while a table's catalog fails (doubling from the commit interval)."""
    pass_timeout_ms: int = 300_000
    """A pass over the tables taking longer is taken as hung (a catalog call that never returns): the worker process
    is killed and started again, the pass counts as failed for every table."""

    def __post_init__(self) -> None:
        if not self.tables:
            raise ValueError("--iceberg-tables: give at least one scope/stream pattern")
        for pattern in self.tables:
            parts = pattern.split("/")
            if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
                raise ValueError(
                    f"--iceberg-tables: {pattern!r} is not a scope/stream pattern (like 'sales/*' or 'sales/orders')"
                )
        if self.catalog is not None and not self.catalog:
            raise ValueError("--iceberg-catalog: the catalog name is empty")
        for key in ("commit_interval_ms", "flush_max_age_ms", "keep_snapshots", "expire_every_commits"):
            if getattr(self, key) < 1:
                raise ValueError(f"iceberg {key}: must be at least 1, not {getattr(self, key)}")
        if self.pin_ttl_ms < 60_000:
            raise ValueError(f"iceberg pin_ttl_ms: must be at least 60000, not {self.pin_ttl_ms}")
        if self.retry_max_delay_ms < self.commit_interval_ms:
            raise ValueError("iceberg retry_max_delay_ms: must be at least commit_interval_ms")
        if self.pass_timeout_ms < 10_000:
            raise ValueError(f"iceberg pass_timeout_ms: must be at least 10000, not {self.pass_timeout_ms}")

    @classmethod
    def parse_tables(cls, value: str) -> tuple[str, ...]:
        """``"a/*, b/s"`` -> ``("a/*", "b/s")`` (the ``--iceberg-tables`` syntax: comma-separated)."""
        return tuple(p.strip() for p in value.split(",") if p.strip())

    def matches(self, scope: str, stream: str) -> bool:
        """Whether stream ``scope/stream`` is a table."""
        if scope.startswith("_") or stream.startswith("_"):
            return False
        return any(
            fnmatch.fnmatchcase(scope, s) and fnmatch.fnmatchcase(stream, t)
            for s, t in (p.split("/") for p in self.tables)
        )

    @property
    def home(self) -> Path:
        """Where the default catalog keeps its database and the tables' metadata."""
        return self.data_dir / "iceberg"

    @classmethod
    def from_cli(cls, args: argparse.Namespace, data_dir: Path) -> IcebergConfig | None:
        """The flags of :func:`add_cli_arguments` (None without ``--iceberg-tables``). Raises ValueError naming
        the flag."""
        if args.iceberg_tables is None:
            for flag in ("iceberg_catalog", "iceberg_commit_interval_ms", "iceberg_flush_max_age_ms"):
                if getattr(args, flag) is not None:
                    raise ValueError(f"--{flag.replace('_', '-')}: needs --iceberg-tables")
            return None
        given = {
            "commit_interval_ms": args.iceberg_commit_interval_ms,
            "flush_max_age_ms": args.iceberg_flush_max_age_ms,
        }
        return cls(
            tables=cls.parse_tables(args.iceberg_tables),
            data_dir=data_dir,
            catalog=args.iceberg_catalog,
            **{key: value for key, value in given.items() if value is not None},
        )


ICEBERG_FLAGS = ("iceberg_tables", "iceberg_catalog", "iceberg_commit_interval_ms", "iceberg_flush_max_age_ms")
"""The flags of :func:`add_cli_arguments` by argparse name (``standalone`` passes them on to its segment store)."""


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--iceberg-*`` flags (an argument group)."""
    defaults = IcebergConfig(tables=("s/t",), data_dir=Path())
    group = parser.add_argument_group("Iceberg tables", "streams kept as Apache Iceberg tables (docs/iceberg.md)")
    group.add_argument(
        "--iceberg-tables",
        metavar="PATTERNS",
        help="comma-separated scope/stream patterns of the streams to keep as Iceberg tables, '*' matching any "
        "name part (e.g. 'sales/*,ops/audit'; default: none)",
    )
    group.add_argument(
        "--iceberg-catalog",
        metavar="NAME",
        help="a pyiceberg catalog configured by name (~/.pyiceberg.yaml or PYICEBERG_CATALOG__NAME__* environment "
        "variables; default: a SQL catalog on SQLite under <data-dir>/iceberg)",
    )
    group.add_argument(
        "--iceberg-commit-interval-ms",
        type=int,
        metavar="MS",
        help=f"how often new chunk files are committed to the tables (default {defaults.commit_interval_ms})",
    )
    group.add_argument(
        "--iceberg-flush-max-age-ms",
        type=int,
        metavar="MS",
        help=f"with tables, appends reach a chunk file at least this often (default {defaults.flush_max_age_ms})",
    )


__all__ = ["ICEBERG_FLAGS", "IcebergConfig", "add_cli_arguments"]
