"""``segstore admin pins`` against a standalone: the live chunk pins of every container, human and --json; a pin
of a chunk that is not the segment's is refused; a released pin is no longer listed. ``tables`` on this standalone
(no ``--iceberg-tables``) says in one line that none are configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration
from controller_client.model import qualified_segment_name
from segment_store.client import BlockingClient, ErrorMessageError

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("admin-pins") / "data") as process:
        yield process


def admin(standalone: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SEGSTORE_CONTROLLER": standalone.controller_uri}
    argv = [sys.executable, "-m", "segstore_cli", "admin", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_pins_lists_live_pins_and_forgets_released_ones(standalone: StandaloneProcess) -> None:
    none = admin(standalone, "pins")
    assert none.returncode == 0 and "no live chunk pins" in none.stdout, none.stderr
    with BlockingStreamManager.connect(standalone.controller_uri) as manager:
        manager.create_scope("shop")
        manager.create_stream("shop", "orders", StreamConfiguration(ScalingPolicy.fixed(1)))
        with manager.create_writer("shop", "orders") as writer:
            writer.write_events([(b"order %d" % i, None) for i in range(100)]).result(60)
    segment = qualified_segment_name("shop", "orders", 0)
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)
        chunks = [c.chunk_name for c in client.list_storage_chunks(segment)]
        assert chunks
        with pytest.raises(ErrorMessageError, match=r"neither in shop/orders/0\.#epoch\.0 nor pinned"):
            client.pin_chunks(segment, "job-1", [*chunks, "data/c0/no-such-chunk.parquet"], 60_000)
        client.pin_chunks(segment, "job-1", chunks, 60_000)

        done = admin(standalone, "pins", "--json")
        assert done.returncode == 0, done.stderr
        (found,) = json.loads(done.stdout)
        assert (found["pin_id"], found["segment"], found["chunks"]) == ("job-1", segment, len(chunks))
        human = admin(standalone, "pins")
        assert human.returncode == 0 and "job-1" in human.stdout and segment in human.stdout

        assert client.unpin_chunks(segment, "job-1") and not client.unpin_chunks(segment, "job-1")
    assert json.loads(admin(standalone, "pins", "--json").stdout) == []


def test_tables_with_tables_off_says_none_are_configured(standalone: StandaloneProcess) -> None:
    human = admin(standalone, "tables")
    assert human.returncode == 0, human.stderr
    assert human.stdout.strip().splitlines() == [
        "no Iceberg tables: the segment stores run without --iceberg-tables (docs/iceberg.md)"
    ]
    assert json.loads(admin(standalone, "tables", "--json").stdout) == {"enabled": False, "tables": []}
