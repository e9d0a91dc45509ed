"""Blocking forms of the client library, for threads without an event loop (scripts, notebooks, Spark).

:class:`BlockingStreamManager` runs a :class:`~controller_client.stream_manager.StreamManager` on an event loop
thread of its own; the writers, transactions, readers, reader groups and key-value tables it makes run on that
loop too, each method blocking until its coroutine ends (their common base: ``segstore_shared.loop_thread``).

* ``streams``: :class:`BlockingStreamManager`, :class:`BlockingEventStreamWriter`,
  :class:`BlockingTransactionalWriter` / :class:`BlockingTransaction`, :class:`BlockingStreamReader`;
* ``reader_groups``: :class:`BlockingReaderGroup`, :class:`BlockingEventStreamReader`;
* ``kvt``: :class:`BlockingKeyValueTable` and its iterators.

Every name is importable from here (``from controller_client.blocking import BlockingStreamManager``, the path of
the former ``controller_client/blocking.py``); the common ones from ``controller_client`` too.
"""

from controller_client.blocking.kvt import (
    BlockingIteratorBuilder,
    BlockingKeyValueTable,
    BlockingKeyValueTableIterator,
)
from controller_client.blocking.reader_groups import BlockingEventStreamReader, BlockingReaderGroup
from controller_client.blocking.streams import (
    BlockingEventStreamWriter,
    BlockingStreamManager,
    BlockingStreamReader,
    BlockingTransaction,
    BlockingTransactionalWriter,
    ControllerFactory,
)

__all__ = [
    "BlockingEventStreamReader",
    "BlockingEventStreamWriter",
    "BlockingIteratorBuilder",
    "BlockingKeyValueTable",
    "BlockingKeyValueTableIterator",
    "BlockingReaderGroup",
    "BlockingStreamManager",
    "BlockingStreamReader",
    "BlockingTransaction",
    "BlockingTransactionalWriter",
    "ControllerFactory",
]
