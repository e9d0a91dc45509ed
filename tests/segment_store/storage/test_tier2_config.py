"""Tier2Config: defaults, environment, flags, validation; open_chunk_storage for both backends."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from s3_fixtures import CREDENTIALS, MotoServer, s3_server_fixture  # noqa: F401 (a fixture)

from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.s3 import S3ChunkStorage
from segment_store.storage.chunk_storage import ChunkStorageError, ChunkStorageFullError
from segment_store.storage.storage_config import ChunkedStorageConfig
from segment_store.storage.tier2_config import Tier2Config, add_cli_arguments, open_chunk_storage

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_are_filesystem_under_data_dir(tmp_path: Path) -> None:
    config = Tier2Config.from_env({})
    assert config == Tier2Config()
    storage = open_chunk_storage(config, tmp_path)
    assert isinstance(storage, FsChunkStorage) and storage.root == tmp_path / "tier2"


def test_from_env_with_s3_settings_and_standard_aws_variables() -> None:
    env = {
        "SEGSTORE_TIER2_BACKEND": "s3",
        "SEGSTORE_TIER2_S3_BUCKET": "bkt",
        "SEGSTORE_TIER2_S3_PART_BYTES": str(6 * 1024 * 1024),
        "SEGSTORE_TIER2_S3_CREATE_BUCKET": "yes",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "UNRELATED": "x",
    }
    config = Tier2Config.from_env(env)
    assert (config.backend, config.s3_bucket, config.s3_endpoint, config.s3_region) == (
        "s3",
        "bkt",
        "http://127.0.0.1:9000",
        "eu-west-1",
    )
    assert (config.s3_access_key_id, config.s3_secret_access_key, config.s3_create_bucket) == ("id", "secret", True)
    assert config.s3_part_bytes == 6 * 1024 * 1024
    assert "secret" not in repr(config)
    overridden = Tier2Config.from_env(
        {**env, "SEGSTORE_TIER2_S3_ENDPOINT": "http://other:1", "AWS_REGION": "us-east-2"}
    )
    assert (overridden.s3_endpoint, overridden.s3_region) == ("http://other:1", "us-east-2")


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"backend": "gcs"}, "backend"),
        ({"backend": "s3"}, "s3_bucket"),
        ({"s3_part_bytes": "1024"}, "s3_part_bytes"),
        ({"s3_part_concurrency": "0"}, "s3_part_concurrency"),
        ({"s3_read_timeout_s": "0"}, "s3_read_timeout_s"),
        ({"s3_access_key_id": "only-the-id"}, "s3_secret_access_key"),
        ({"s3_create_bucket": "maybe"}, "s3_create_bucket"),
        ({"s3_max_attempts": "three"}, "s3_max_attempts"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_settings_raise_value_error_naming_the_key(values: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        Tier2Config.from_mapping(values)


def test_flags_override_environment(tmp_path: Path) -> None:
    env = {"SEGSTORE_TIER2_BACKEND": "s3", "SEGSTORE_TIER2_S3_PREFIX": "env/"}
    args = parse("--s3-bucket", "flagged", "--s3-endpoint", "http://127.0.0.1:1", "--s3-create-bucket")
    config = Tier2Config.from_cli(args, env)  # the bucket only comes from a flag: fine
    assert (config.backend, config.s3_bucket, config.s3_prefix, config.s3_create_bucket) == (
        "s3",
        "flagged",
        "env/",
        True,
    )
    root = tmp_path / "x"
    assert Tier2Config.from_cli(parse("--tier2", "fs", "--tier2-dir", str(root)), env).fs_root == root
    assert Tier2Config.from_cli(parse(), {}) == Tier2Config()
    with pytest.raises(ValueError, match=r"^--s3-bucket: required"):  # the flag, not the field
        Tier2Config.from_cli(parse("--tier2", "s3"), {})


def test_open_chunk_storage_with_s3_creates_bucket_and_works(s3_server: MotoServer, tmp_path: Path) -> None:
    config = Tier2Config(
        backend="s3",
        s3_endpoint=s3_server.endpoint,
        s3_bucket="opened-by-config",
        s3_prefix="p",
        s3_region=CREDENTIALS["region"],
        s3_access_key_id=CREDENTIALS["access_key_id"],
        s3_secret_access_key=CREDENTIALS["secret_access_key"],
        s3_create_bucket=True,
    )
    storage = open_chunk_storage(config, tmp_path)
    assert isinstance(storage, S3ChunkStorage) and storage.prefix == "p/"
    storage.write_chunk("x/y", b"data")
    assert storage.read_all("x/y") == b"data"
    storage.close()
    with pytest.raises(ChunkStorageError, match="no such S3 bucket"):
        open_chunk_storage(
            Tier2Config(**{**_fields(config), "s3_bucket": "missing", "s3_create_bucket": False}), tmp_path
        )


def _fields(config: Tier2Config) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_chunked_storage_config_reads_its_own_prefix_and_booleans() -> None:
    config = ChunkedStorageConfig.from_mapping({"compaction_enabled": "off", "gc_delay_s": "2.5"})
    assert (config.compaction_enabled, config.gc_delay_s) == (False, 2.5)
    with pytest.raises(ValueError, match="gc_retry_max_delay_s"):
        ChunkedStorageConfig(gc_retry_min_delay_s=5, gc_retry_max_delay_s=1)
    with pytest.raises(ValueError, match="compaction_min_chunks"):
        ChunkedStorageConfig(compaction_min_chunks=1)


def test_full_while_file_makes_writes_fail_as_a_full_disk_while_it_exists(tmp_path: Path) -> None:
    """The self-test's ``tier2_disk_full`` hook (``SEGSTORE_TIER2_FULL_WHILE_FILE``): while the file exists a chunk
    write fails with a retriable ``ChunkStorageFullError`` (ENOSPC) and publishes nothing; reads go on; once the
    file is gone the same write succeeds."""
    switch = tmp_path / "full"
    config = Tier2Config.from_env({"SEGSTORE_TIER2_FULL_WHILE_FILE": str(switch)})
    assert config.full_while_file == switch
    storage = open_chunk_storage(config, tmp_path)
    storage.write_chunk("a/before", b"kept")
    switch.touch()
    with pytest.raises(ChunkStorageFullError, match="No space left on device") as caught:
        storage.write_chunk("a/during", b"refused")
    assert caught.value.retriable
    assert not storage.exists("a/during") and storage.read_all("a/before") == b"kept"
    switch.unlink()
    storage.write_chunk("a/during", b"stored")
    assert storage.read_all("a/during") == b"stored"
    assert Tier2Config.from_env({}).full_while_file is None
