"""A stream is listed (and ``stream_exists``) from the moment its creation starts, before its first segments exist.
A reader that finds it in a listing and at once asks for its head, its tail or a transaction (a ``streamPattern``
query discovering a new stream does exactly this) gets the whole stream a moment later, never an error about a
missing record or segment: the controller answers "still being created" as a retriable error, which the client
retries within its time budget."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STREAMS = 12


def test_a_stream_read_as_soon_as_it_is_listed_is_whole(tmp_path: Path) -> None:
    with StandaloneProcess(tmp_path / "data") as standalone:
        manager = BlockingStreamManager.connect(standalone.controller_uri)
        try:
            manager.create_scope("s")
            looked_up: list[str] = []
            for i in range(STREAMS):
                name = f"new-{i}"
                created = threading.Event()

                def create(stream: str = name, done: threading.Event = created) -> None:
                    manager.create_stream("s", stream, StreamConfiguration(ScalingPolicy.fixed(4)))
                    done.set()

                creator = threading.Thread(target=create, daemon=True)
                creator.start()
                while not created.is_set():  # the listing races the creation: look up the stream whenever it shows
                    if name in manager.list_streams("s"):
                        head = manager.head_cut("s", name)
                        tail = manager.tail_cut("s", name)
                        assert len(head.positions) == len(tail.positions) == 4
                        looked_up.append(name)
                creator.join(30)
                assert not creator.is_alive()
            assert looked_up, "no look-up raced a creation (the listing never showed a stream before it was whole)"
        finally:
            manager.close()
