"""The official Pravega Python client (``pip install pravega``, module ``pravega_client``) against
``segstore standalone``: scopes, streams with several segments, 100,000 events over many routing keys
read back through a reader group (whose state the client keeps in a table segment), transactions,
seal and delete."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from official_client import assert_each_key_in_order, official_read
from standalone_process import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 100_000
KEYS = 200


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data_dir: Path = tmp_path_factory.mktemp("standalone")
    with StandaloneProcess(data_dir) as process:
        yield process


def _event(key: int, seq: int) -> str:
    return f"k{key:04d}:{seq:07d}"


def test_write_and_read_100k_events_over_many_routing_keys(standalone: StandaloneProcess) -> None:
    manager = pravega_client.StreamManager(standalone.controller_uri)
    assert manager.create_scope("interop")
    assert manager.create_stream("interop", "events", 4)
    writer = manager.create_writer("interop", "events", 1000)
    sequence: dict[int, int] = defaultdict(int)
    for i in range(EVENTS):
        key = i % KEYS
        writer.write_event(_event(key, sequence[key]), f"key-{key}")
        sequence[key] += 1
    writer.flush()

    events = official_read(standalone.controller_uri, "interop", "events", "group-1", EVENTS, 120)

    assert len(events) == EVENTS
    assert len(set(events)) == EVENTS  # nothing twice
    assert_each_key_in_order(events)


def test_committed_transaction_is_visible_and_aborted_is_not(standalone: StandaloneProcess) -> None:
    manager = pravega_client.StreamManager(standalone.controller_uri)
    manager.create_scope("interop-txn")
    manager.create_stream("interop-txn", "orders", 2)
    txn_writer = manager.create_transaction_writer("interop-txn", "orders", 1)

    committed = txn_writer.begin_txn()
    for i in range(100):
        committed.write_event(f"committed-{i}", f"key-{i % 7}")
    aborted = txn_writer.begin_txn()
    for i in range(100):
        aborted.write_event(f"aborted-{i}", f"key-{i % 7}")
    aborted.abort()
    committed.commit()
    assert not committed.is_open()

    plain = manager.create_writer("interop-txn", "orders")
    plain.write_event("after", "key-0")
    plain.flush()

    events = official_read(standalone.controller_uri, "interop-txn", "orders", "txn-group", 101)
    assert sorted(events) == sorted([f"committed-{i}" for i in range(100)] + ["after"])


def test_seal_and_delete_stream(standalone: StandaloneProcess) -> None:
    manager = pravega_client.StreamManager(standalone.controller_uri)
    manager.create_scope("interop-seal")
    manager.create_stream("interop-seal", "short-lived", 3)
    writer = manager.create_writer("interop-seal", "short-lived")
    writer.write_event("one")
    writer.flush()
    assert manager.seal_stream("interop-seal", "short-lived")
    assert manager.delete_stream("interop-seal", "short-lived")
    assert "short-lived" not in [str(s) for s in manager.list_stream("interop-seal")]
    assert manager.delete_scope("interop-seal")


def test_wide_stream_works_up_to_the_clients_own_limit_of_64_segments(standalone: StandaloneProcess) -> None:
    """The official client (0.3.7) routes keys over at most 64 segments: 64 work end to end; with 65 its
    writer fails (its own lookup of a key's segment panics) although the controller's key ranges are whole.
    README says so; if a newer client lifts the limit, this test says it is time to change README."""
    manager = pravega_client.StreamManager(standalone.controller_uri)
    manager.create_scope("interop-wide")
    manager.create_stream("interop-wide", "wide64", 64)
    writer = manager.create_writer("interop-wide", "wide64", 1000)
    for i in range(2000):
        writer.write_event(_event(i % 500, i // 500), f"key-{i % 500}")
    writer.flush()
    events = official_read(standalone.controller_uri, "interop-wide", "wide64", "group-wide", 2000, 120)
    assert len(events) == 2000 and len(set(events)) == 2000
    assert_each_key_in_order(events)

    manager.create_stream("interop-wide", "wide65", 65)
    writer = manager.create_writer("interop-wide", "wide65", 1000)
    with pytest.raises(Exception, match="RecvError"):
        for i in range(500):
            writer.write_event(_event(i, 0), f"key-{i}")
        writer.flush()
