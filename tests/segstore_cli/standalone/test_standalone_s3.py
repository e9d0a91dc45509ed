"""``segstore standalone --tier2 s3``: flushed events land as Parquet chunks in the S3 bucket (a moto server
on loopback), and a restart reads them back from there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from s3_fixtures import CREDENTIALS, MotoServer, s3_server_fixture  # noqa: F401
from standalone_process import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_standalone_with_s3_tier2_keeps_events_in_the_bucket(s3_server: MotoServer, tmp_path: Path) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": CREDENTIALS["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret_access_key"],
        "AWS_DEFAULT_REGION": CREDENTIALS["region"],
    }
    flags = ("--tier2", "s3", "--s3-endpoint", s3_server.endpoint, "--s3-bucket", "standalone", "--s3-create-bucket")
    events = [f"event-{i}" for i in range(500)]
    with StandaloneProcess(tmp_path, extra_args=flags, env=env) as first:
        manager = pravega_client.StreamManager(first.controller_uri)
        manager.create_scope("s3")
        manager.create_stream("s3", "st", 2)
        writer = manager.create_writer("s3", "st", 100)
        for event in events:
            writer.write_event(event)
        writer.flush()
        bucket = s3_server.client()
        deadline = time.monotonic() + 30
        keys: list[str] = []
        while time.monotonic() < deadline and not any(k.endswith(".parquet") and "s3%2Fst" in k for k in keys):
            time.sleep(0.5)
            listing = bucket.list_objects_v2(Bucket="standalone")
            keys = [o["Key"] for o in listing.get("Contents", [])]
        assert any(k.endswith(".parquet") and "s3%2Fst" in k for k in keys), keys
        assert not (tmp_path / "tier2").exists()

    with StandaloneProcess(tmp_path, extra_args=flags, env=env) as second:
        manager = pravega_client.StreamManager(second.controller_uri)
        reader = manager.create_reader_group("after", "s3", "st").create_reader("r")
        got: list[str] = []

        async def consume() -> None:
            while len(got) < len(events):
                segment_slice = await reader.get_segment_slice_async()
                got.extend(e.data().decode() for e in segment_slice)
                reader.release_segment(segment_slice)

        asyncio.run(asyncio.wait_for(consume(), 60))
        reader.reader_offline()
        assert sorted(got) == sorted(events)
