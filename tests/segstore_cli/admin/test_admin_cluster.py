"""``segstore admin containers`` and ``segstore admin transactions`` against a standalone: answered by segstore's
admin extension of the controller (controller.rpc.admin), human and --json, and its errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client.controller.api import ControllerClient
from controller_client.model import ScalingPolicy, StreamConfiguration

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("admin-cluster") / "data") as process:
        yield process


def admin(standalone: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SEGSTORE_CONTROLLER": standalone.controller_uri}
    argv = [sys.executable, "-m", "segstore_cli", "admin", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_containers_shows_which_segment_store_runs_each(standalone: StandaloneProcess) -> None:
    done = admin(standalone, "containers", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["container_count"] == 4
    ((host, ids),) = found["hosts"].items()
    assert ids == [0, 1, 2, 3] and host.endswith(f":{standalone.segmentstore_port}")
    human = admin(standalone, "containers")
    assert human.returncode == 0 and "0, 1, 2, 3" in human.stdout and "4 of 4 containers assigned" in human.stdout


def test_transactions_lists_the_open_ones(standalone: StandaloneProcess) -> None:
    async def open_two() -> list[str]:
        async with await ControllerClient.connect(standalone.controller_uri) as controller:
            await controller.create_scope("shop")
            await controller.create_stream("shop", "orders", StreamConfiguration(ScalingPolicy.fixed(1)))
            first, _ = await controller.create_transaction("shop", "orders", 60_000)
            second, _ = await controller.create_transaction("shop", "orders", 60_000)
            return [str(first), str(second)]

    opened = asyncio.run(open_two())
    done = admin(standalone, "transactions", "shop/orders", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["transactions"]
    assert sorted(t["id"] for t in found) == sorted(opened) and {t["status"] for t in found} == {"OPEN"}
    human = admin(standalone, "transactions", "shop/orders")
    assert human.returncode == 0 and all(txn in human.stdout for txn in opened)
    missing = admin(standalone, "transactions", "shop/missing")
    assert missing.returncode == 1 and "shop/missing" in missing.stderr and "does not exist" in missing.stderr


def test_reader_group_describe_shows_the_official_clients_readers_and_their_lag(standalone: StandaloneProcess) -> None:
    import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped

    official = pravega_client.StreamManager(standalone.controller_uri)
    official.create_scope("rg")
    official.create_stream("rg", "events", 2)
    writer = official.create_writer("rg", "events")
    for i in range(10):
        writer.write_event(f"e{i}", f"key-{i}")
    writer.flush()
    group = official.create_reader_group("billing", "rg", "events")
    reader = group.create_reader("reader-1")  # kept: a reader the client drops goes offline
    deadline = time.monotonic() + 20
    while True:  # create_reader returns before the client's state update has landed
        done = admin(standalone, "reader-group", "describe", "rg/billing", "--json")
        assert done.returncode == 0, done.stderr
        readers = json.loads(done.stdout)["readers"]
        if readers and {r["reader"] for r in readers} == {"reader-1"}:
            break
        assert time.monotonic() < deadline, f"the reader never showed: {readers}"
        time.sleep(0.1)
    assert len(readers) == 2 and all(r["offset"] == 0 for r in readers)
    assert sum(r["lag_bytes"] for r in readers) == 10 * (8 + 2)  # nothing read yet: every event is behind
    human = admin(standalone, "reader-group", "describe", "rg/billing")
    assert human.returncode == 0 and "reader-1" in human.stdout and "not registered with the controller" in human.stdout
    assert admin(standalone, "reader-group", "describe", "rg/nobody").returncode == 1
    del reader
