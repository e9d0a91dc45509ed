"""A reader of a reader group in its own process, for tests/integration/test_reader_group_processes.py.

``python group_reader_process.py URI SCOPE GROUP READER OUT TIMEOUT_S``: joins the group with our client and
appends one line per event to OUT, ``<monotonic ns> <event>``, flushed at once (a kill -9 loses at most the line
being written), until the group has nothing left to read. CLOCK_MONOTONIC is one clock for every process of the
machine, so the lines of all readers can be merged in the order the events were returned.
"""

from __future__ import annotations

import sys
import time

from controller_client.blocking.streams import BlockingStreamManager
from controller_client.reader_groups.reader import GroupReaderConfig


def main() -> None:
    uri, scope, group_name, reader_name, out, timeout_s = sys.argv[1:7]
    config = GroupReaderConfig(refresh_interval_s=0.1, reader_timeout_s=float(timeout_s))
    with BlockingStreamManager.connect(uri) as manager, open(out, "a", buffering=1) as lines:
        group = manager.reader_group(scope, group_name)
        with group.create_reader(reader_name, config) as reader:
            print("joined", flush=True)
            for event in reader.events(timeout_s=0.2):
                if event.data is not None:
                    lines.write(f"{time.monotonic_ns()} {event.data.decode()}\n")


if __name__ == "__main__":
    main()
