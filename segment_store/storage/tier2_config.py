"""Which Tier-2 backend a segment store process uses, and :func:`open_chunk_storage` to open it.

Filesystem (the default) keeps chunks under ``<data dir>/tier2`` unless ``fs_root`` says
otherwise. S3 needs a bucket; endpoint (MinIO, moto, any S3-compatible store), prefix and region
are optional. Credentials left unset come from boto3's default chain, which reads the standard
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` variables first (then
``~/.aws`` and instance roles), so secrets need not be in a config file.

Sources, later ones winning: defaults, environment (:meth:`Tier2Config.from_env`), command-line
flags (:func:`add_cli_arguments` + :meth:`Tier2Config.from_cli`).

==============================  ===============================  ==============================
field                           environment                      flag
==============================  ===============================  ==============================
``backend``                     ``SEGSTORE_TIER2_BACKEND``       ``--tier2 {fs,s3}``
``fs_root``                     ``SEGSTORE_TIER2_FS_ROOT``       ``--tier2-dir PATH``
``s3_endpoint``                 ``SEGSTORE_TIER2_S3_ENDPOINT``,  ``--s3-endpoint URL``
                                ``AWS_ENDPOINT_URL_S3``,
                                ``AWS_ENDPOINT_URL``
``s3_bucket``                   ``SEGSTORE_TIER2_S3_BUCKET``     ``--s3-bucket NAME``
``s3_prefix``                   ``SEGSTORE_TIER2_S3_PREFIX``     ``--s3-prefix PREFIX``
``s3_region``                   ``SEGSTORE_TIER2_S3_REGION``,    ``--s3-region REGION``
                                ``AWS_REGION``,
                                ``AWS_DEFAULT_REGION``
``s3_access_key_id`` ...        ``AWS_ACCESS_KEY_ID``,           (environment only)
                                ``AWS_SECRET_ACCESS_KEY``,
                                ``AWS_SESSION_TOKEN``
``s3_create_bucket``            ``SEGSTORE_TIER2_S3_CREATE_BUCKET``  ``--s3-create-bucket``
other ``s3_*`` tuning           ``SEGSTORE_TIER2_<FIELD>``       (none)
``full_while_file`` (a test     ``SEGSTORE_TIER2_FULL_WHILE_FILE``  (none)
hook of ``segstore selftest``)
==============================  ===============================  ==============================
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from segment_store.storage.backends.faulty import full_while
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.s3 import MIN_PART_BYTES, S3ChunkStorage, make_s3_client
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.storage_config import parse_bool
from segstore_shared.errors import naming_flags

MIB = 1024 * 1024
ENV_PREFIX = "SEGSTORE_TIER2_"
Backend = Literal["fs", "s3"]
_FALLBACKS: dict[str, tuple[str, ...]] = {
    "s3_endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "s3_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "s3_access_key_id": ("AWS_ACCESS_KEY_ID",),
    "s3_secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "s3_session_token": ("AWS_SESSION_TOKEN",),
}
_SECRETS = frozenset({"s3_access_key_id", "s3_secret_access_key", "s3_session_token"})


@dataclass(frozen=True, slots=True)
class Tier2Config:
    """The Tier-2 backend and its settings (see the module docstring for sources)."""

    backend: Backend = "fs"
    """``fs`` (a directory, the default) or ``s3``."""
    fs_root: Path | None = None
    """Filesystem backend: the chunk directory; ``None`` means ``<data dir>/tier2``."""
    s3_endpoint: str | None = None
    """S3: endpoint URL of an S3-compatible store (``http://127.0.0.1:9000``); ``None`` is AWS."""
    s3_bucket: str | None = None
    """S3: the bucket (required for ``s3``)."""
    s3_prefix: str = "segstore/"
    """S3: key prefix of every chunk (lets several clusters share a bucket)."""
    s3_region: str | None = None
    """S3: the region; ``None`` lets boto3 decide (``AWS_REGION``, ``~/.aws/config``)."""
    s3_access_key_id: str | None = field(default=None, repr=False)
    """S3 credentials; ``None`` uses boto3's default chain."""
    s3_secret_access_key: str | None = field(default=None, repr=False)
    s3_session_token: str | None = field(default=None, repr=False)
    s3_create_bucket: bool = False
    """S3: create the bucket at start if it is missing (development, tests)."""
    s3_multipart_threshold_bytes: int = 16 * MIB
    """S3: chunks of this size or more are sent as multipart uploads..."""
    s3_part_bytes: int = 8 * MIB
    """...in parts of this size (at least 5 MiB)..."""
    s3_part_concurrency: int = 4
    """...this many at once."""
    s3_connect_timeout_s: float = 5.0
    s3_read_timeout_s: float = 30.0
    s3_max_attempts: int = 3
    """Attempts per S3 call inside botocore (its standard retry mode), before an outage is reported."""
    full_while_file: Path | None = None
    """Fault injection (``segstore selftest``'s ``tier2_disk_full``): while this file exists every chunk write fails
    as on a full disk (ENOSPC: ``ChunkStorageFullError``, retried); None (the default): no such hook."""

    def __post_init__(self) -> None:
        if self.backend not in ("fs", "s3"):
            raise ValueError(f"backend: must be 'fs' or 's3', not {self.backend!r}")
        for key in ("fs_root", "full_while_file"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, key, Path(value))
        if self.backend == "s3" and not self.s3_bucket:
            raise ValueError("s3_bucket: required with backend 's3' (--tier2 s3)")
        if self.s3_part_bytes < MIN_PART_BYTES:
            raise ValueError(f"s3_part_bytes: must be at least {MIN_PART_BYTES}")
        if self.s3_multipart_threshold_bytes < self.s3_part_bytes:
            raise ValueError("s3_multipart_threshold_bytes: must be >= s3_part_bytes")
        for key in ("s3_part_concurrency", "s3_max_attempts"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be at least 1")
        for key in ("s3_connect_timeout_s", "s3_read_timeout_s"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be positive")
        if (self.s3_access_key_id is None) != (self.s3_secret_access_key is None):
            raise ValueError("s3_secret_access_key: give both access key id and secret, or neither")

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> Tier2Config:
        """Build from string values keyed by field name; unknown keys raise ``ValueError`` naming the key."""
        return cls(**_parse(values))  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tier2Config:
        """Build from ``SEGSTORE_TIER2_<FIELD>`` variables and the standard AWS ones (see module docstring)."""
        return cls.from_mapping(_env_values(os.environ if environ is None else environ))

    @classmethod
    def from_cli(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Tier2Config:
        """The environment's settings with the flags of :func:`add_cli_arguments` that were given on top."""
        values = _parse(_env_values(os.environ if environ is None else environ))
        for flag, key in _CLI_FIELDS.items():
            value = getattr(args, flag, None)
            if value is not None:
                values[key] = value
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValueError as exc:  # "--s3-bucket: ...", not "s3_bucket: ..."
            raise naming_flags(exc, {key: f"--{flag.replace('_', '-')}" for flag, key in _CLI_FIELDS.items()}) from exc


def _env_values(env: Mapping[str, str]) -> dict[str, str]:
    values = {name[len(ENV_PREFIX) :].lower(): value for name, value in env.items() if name.startswith(ENV_PREFIX)}
    for key, names in _FALLBACKS.items():
        if key not in values:
            found = next((env[n] for n in names if env.get(n)), None)
            if found is not None:
                values[key] = found
    return values


_CLI_FIELDS = {
    "tier2": "backend",
    "tier2_dir": "fs_root",
    "s3_endpoint": "s3_endpoint",
    "s3_bucket": "s3_bucket",
    "s3_prefix": "s3_prefix",
    "s3_region": "s3_region",
    "s3_create_bucket": "s3_create_bucket",
}


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the Tier-2 flags (``--tier2``, ``--tier2-dir``, ``--s3-*``); all default to "not given"."""
    group = parser.add_argument_group("Tier-2", "where segment data goes once flushed (credentials: AWS_* variables)")
    group.add_argument("--tier2", choices=("fs", "s3"), help="backend (default fs, or $SEGSTORE_TIER2_BACKEND)")
    group.add_argument("--tier2-dir", type=Path, help="filesystem backend: chunk directory (default <data dir>/tier2)")
    group.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default AWS)")
    group.add_argument("--s3-bucket", help="S3 bucket")
    group.add_argument("--s3-prefix", help="key prefix of every chunk (default segstore/)")
    group.add_argument("--s3-region", help="S3 region")
    group.add_argument("--s3-create-bucket", action="store_true", default=None, help="create the bucket if missing")


def open_chunk_storage(config: Tier2Config, data_dir: str | os.PathLike[str]) -> ChunkStorage:
    """Open the configured backend (S3: check the bucket is reachable, creating it if configured to).

    Raises:
        ChunkStorageError: S3 bucket missing or not accessible.
        ChunkStorageUnavailableError: S3 unreachable.
    """
    storage = _open_backend(config, data_dir)
    if config.full_while_file is not None:
        return full_while(storage, config.full_while_file)
    return storage


def _open_backend(config: Tier2Config, data_dir: str | os.PathLike[str]) -> ChunkStorage:
    if config.backend == "fs":
        return FsChunkStorage(config.fs_root if config.fs_root is not None else Path(data_dir) / "tier2")
    assert config.s3_bucket is not None  # checked by Tier2Config
    client = make_s3_client(
        endpoint_url=config.s3_endpoint,
        region=config.s3_region,
        access_key_id=config.s3_access_key_id,
        secret_access_key=config.s3_secret_access_key,
        session_token=config.s3_session_token,
        connect_timeout_s=config.s3_connect_timeout_s,
        read_timeout_s=config.s3_read_timeout_s,
        max_attempts=config.s3_max_attempts,
        max_pool_connections=max(16, config.s3_part_concurrency * 4),
    )
    storage = S3ChunkStorage(
        client,
        config.s3_bucket,
        config.s3_prefix,
        endpoint_url=config.s3_endpoint,
        multipart_threshold_bytes=config.s3_multipart_threshold_bytes,
        part_bytes=config.s3_part_bytes,
        part_concurrency=config.s3_part_concurrency,
    )
    try:
        storage.check_bucket(create=config.s3_create_bucket, region=config.s3_region)
    except BaseException:
        storage.close()
        raise
    return storage


def _parse(values: Mapping[str, str]) -> dict[str, object]:
    known = {f.name: f for f in fields(Tier2Config)}
    parsed: dict[str, object] = {}
    for key, raw in values.items():
        if key not in known:
            raise ValueError(f"{key}: unknown Tier-2 setting")
        default = known[key].default
        try:
            if key in ("fs_root", "full_while_file"):
                parsed[key] = Path(raw) if raw else None
            elif isinstance(default, bool):
                parsed[key] = parse_bool(raw)
            elif isinstance(default, int):
                parsed[key] = int(raw)
            elif isinstance(default, float):
                parsed[key] = float(raw)
            else:
                parsed[key] = raw if raw or key in _SECRETS else None
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from exc
    return parsed
