"""The blocking facade, used from plain threads (the service runs on the test's event loop)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from segment_store.client import BlockingClient, ConditionalCheckFailedError, NoSuchSegmentError
from segment_store.server.service import SegmentStoreService

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"


def _write_and_read(endpoint: tuple[str, int]) -> list[bytes]:
    assert threading.current_thread() is not threading.main_thread()
    with BlockingClient(endpoint) as client:
        client.create_segment(SEGMENT)
        with client.writer(SEGMENT) as writer:
            acks = [writer.write(b"single-%d" % i) for i in range(100)]
            batch = writer.write_many(b"batch-%d" % i for i in range(5_000))
            writer.flush(timeout_s=10)
            assert all(a.done() and a.exception() is None for a in acks) and batch.result(0) is None
        with pytest.raises(NoSuchSegmentError):
            client.seal_segment("scope/stream/missing")
        info = client.get_segment_info(SEGMENT)
        with client.reader(SEGMENT, end_offset=info.write_offset) as reader:
            return [event.data for event in reader]


async def test_blocking_client_from_a_plain_thread_round_trips(service: SegmentStoreService) -> None:
    events = await asyncio.to_thread(_write_and_read, service.endpoint)
    assert events == [b"single-%d" % i for i in range(100)] + [b"batch-%d" % i for i in range(5_000)]


def _threads_share_one_client(endpoint: tuple[str, int]) -> dict[str, object]:
    with BlockingClient(endpoint) as client:
        client.create_segment(SEGMENT)
        client.create_table_segment("_tables/t")

        def work(n: int) -> None:
            with client.writer(SEGMENT) as writer:
                for i in range(500):
                    writer.write(b"%d-%d" % (n, i))
            client.update_table_entries("_tables/t", [(b"k%d" % n, b"v%d" % n)])

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with client.conditional_writer(SEGMENT) as conditional:
            length = client.get_segment_info(SEGMENT).write_offset
            new_length = conditional.append(b"last", length)
            with pytest.raises(ConditionalCheckFailedError):
                conditional.append(b"stale", length)
        return {
            "events": len(list(client.reader(SEGMENT, end_offset=new_length))),
            "table": sorted(e.key for e in client.read_table_entries("_tables/t").entries),
        }


async def test_blocking_client_with_threads_sharing_it_writes_everything(service: SegmentStoreService) -> None:
    result = await asyncio.to_thread(_threads_share_one_client, service.endpoint)
    assert result == {"events": 4 * 500 + 1, "table": [b"k0", b"k1", b"k2", b"k3"]}


def test_blocking_client_after_close_raises_client_closed() -> None:
    from segment_store.client import ClientClosedError

    client = BlockingClient(("127.0.0.1", 1))
    client.close()
    client.close()
    with pytest.raises(ClientClosedError):
        client.get_segment_info(SEGMENT)
