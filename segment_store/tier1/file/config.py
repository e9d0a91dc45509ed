"""Configuration of the file ledger log (one frozen dataclass; defaults written once, here)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from segment_store.tier1.file.ledger_file import ENTRY_HEADER, FILE_HEADER
from segstore_shared.coordination.store import validate_path

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileLedgerLogConfig:
    """Settings of :class:`segment_store.tier1.file.ledger_log.FileLedgerLog`.

    Ledger files live under ``<root_dir>/<log name>/``; each log's metadata node is
    ``<metadata_root>/<log name>`` in the coordination store.
    """

    root_dir: Path
    metadata_root: str = "/segstore/tier1/logs"
    # A new ledger starts once the current one holds this many bytes (checked per group).
    rollover_size_bytes: int = 256 * MIB
    # Longest accepted append: a 1 MiB data frame plus header room.
    max_append_length_bytes: int = MIB + 8 * 1024
    # fsync (fdatasync) every group commit and every new file's directory. Off only for tests.
    fsync: bool = True
    # Upper bound of one group commit (one write + one fsync); a single entry may exceed it.
    max_batch_bytes: int = 8 * MIB
    # About how much a recovery read loads per worker-thread call.
    read_batch_bytes: int = 8 * MIB
    # How long metadata reads/updates retry a lost ZooKeeper connection before giving up.
    coordination_timeout_s: float = 30.0
    # First back-off delay of those retries (doubles up to 1 s).
    coordination_retry_delay_s: float = 0.05
    # Ownership lease: a confirmed ownership check covers the groups synced within half of this after it
    # started, and a new owner waits this long after fencing before it reads the log (0: check every group,
    # no wait). Recorded in the log's metadata, so the new owner waits what the old one assumed.
    ownership_lease_s: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.root_dir, Path):
            object.__setattr__(self, "root_dir", Path(self.root_dir))
        try:
            validate_path(self.metadata_root)
        except ValueError as exc:
            raise ValueError(f"metadata_root: {exc}") from exc
        if self.metadata_root == "/":
            raise ValueError("metadata_root: must not be the root node")
        if self.max_append_length_bytes <= 0:
            raise ValueError("max_append_length_bytes: must be positive")
        if self.max_append_length_bytes >= 1 << 32:
            raise ValueError("max_append_length_bytes: must fit the entry's 32-bit length field")
        smallest_ledger = FILE_HEADER.size + ENTRY_HEADER.size + self.max_append_length_bytes
        if self.rollover_size_bytes < smallest_ledger:
            raise ValueError(
                f"rollover_size_bytes: {self.rollover_size_bytes} cannot hold one maximal entry "
                f"(needs >= {smallest_ledger})"
            )
        if self.max_batch_bytes <= 0:
            raise ValueError("max_batch_bytes: must be positive")
        if self.read_batch_bytes <= 0:
            raise ValueError("read_batch_bytes: must be positive")
        if self.coordination_timeout_s <= 0:
            raise ValueError("coordination_timeout_s: must be positive")
        if not 0 <= self.ownership_lease_s <= 60:
            raise ValueError("ownership_lease_s: must be between 0 and 60")
        if not 0 < self.coordination_retry_delay_s <= self.coordination_timeout_s:
            raise ValueError("coordination_retry_delay_s: must be positive and below coordination_timeout_s")

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> FileLedgerLogConfig:
        """Build from string values (a config file section); unknown keys raise ``ValueError``."""
        known = {field.name: field for field in fields(cls)}
        parsed: dict[str, object] = {}
        for key, raw in values.items():
            if key not in known:
                raise ValueError(f"{key}: unknown file ledger log setting")
            default = known[key].default
            if key == "root_dir":
                parsed[key] = Path(raw)
            elif isinstance(default, bool):
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(f"{key}: expected a boolean, got {raw!r}")
                parsed[key] = raw.lower() in ("1", "true", "yes")
            elif isinstance(default, int):
                parsed[key] = int(raw)
            elif isinstance(default, float):
                parsed[key] = float(raw)
            else:
                parsed[key] = raw
        if "root_dir" not in parsed:
            raise ValueError("root_dir: required")
        return cls(**parsed)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, prefix: str = "SEGSTORE_TIER1_") -> FileLedgerLogConfig:
        """Build from environment variables named ``<prefix><FIELD IN CAPITALS>``."""
        values = {name[len(prefix) :].lower(): value for name, value in os.environ.items() if name.startswith(prefix)}
        return cls.from_mapping(values)
