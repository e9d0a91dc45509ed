"""Client library of segstore streams: controller client, StreamManager, event writers and readers, reader groups,
key-value tables. Every class named here is importable from ``controller_client``; the modules, by subpackage:

* ``stream_manager``: :class:`StreamManager` - scopes, streams, policies, stream cuts (head, tail, at a time),
  truncation; makes the writers, readers, reader groups and key-value tables below, all sharing one segment client
  whose endpoints come from the controller (``getURI``).
* ``writers``: :class:`EventStreamWriter` (``writers.event_writer``) - events routed by routing key (Pravega's
  hash, so the Java and Rust clients agree, ``writers.routing``), per-key order, follows scaling without loss or
  duplicates; :class:`TransactionalEventStreamWriter` / :class:`Transaction` (``writers.txn_writer``) -
  all-or-nothing writes.
* ``readers``: :class:`StreamReader` (``readers.stream_reader``) - events between two stream cuts, or following the
  tail, segment by segment in successor order.
* ``reader_groups``: :class:`ReaderGroup` / :class:`EventStreamReader` (``reader_groups.group``,
  ``reader_groups.reader``) - readers in any processes sharing streams, each segment read by one, balanced, with
  checkpoints; the state is in the official Pravega client's format (``reader_groups.format``), so its readers can
  join our groups.
* ``kvt``: key-value tables (``kvt.table``, made by ``StreamManager.key_value_table``; keys, versions and
  configuration in ``kvt.model``, ordered iteration in ``kvt.iterator``).
* ``blocking``: the same for threads without an event loop (:class:`BlockingStreamManager`).
* ``controller``: :class:`ControllerClient` (``controller.api``), the gRPC controller client; the library talks to
  the controller only through the :class:`ControllerApi` port (``ports``). ``tls://host:port`` URIs
  (``controller.channel``) use TLS to the controller and to the segment stores, trusting
  ``ControllerClientConfig.trust_store`` (the system's trust store when None).
* At the root, shared by all: ``model`` (streams, segments, stream cuts, policies), ``errors``, ``ports``,
  ``watermarks``.

The flat module paths from before 0.2.0 (``controller_client.event_writer``, ``controller_client.routing``, ...) keep
working for one release (``segstore_shared.compat``, with a DeprecationWarning).

Example::

    from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager

    async with await ControllerClient.connect("tcp://127.0.0.1:9090") as controller:
        async with StreamManager(controller) as manager:
            await manager.create_scope("demo")
            await manager.create_stream("demo", "events", StreamConfiguration(ScalingPolicy.fixed(4)))
            async with await manager.create_writer("demo", "events") as writer:  # close() flushes
                for i in range(1000):
                    await writer.write_event(b"event %d" % i, routing_key=f"user-{i % 10}")
            end = await manager.tail_cut("demo", "events")
            async with manager.create_reader("demo", "events", end=end) as reader:  # start: the head
                async for event in reader:
                    print(event.segment_id, event.offset, event.data)

Names are imported on first use, so ``import controller_client.model`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from segstore_shared import compat as _compat

_compat.install()  # old import paths of moved modules, for one release (CHANGELOG.md 0.2.0)

if TYPE_CHECKING:
    from controller_client.blocking import (
        BlockingEventStreamReader,
        BlockingEventStreamWriter,
        BlockingReaderGroup,
        BlockingStreamManager,
        BlockingStreamReader,
        BlockingTransaction,
        BlockingTransactionalWriter,
    )
    from controller_client.controller.api import ControllerClient, ControllerClientConfig
    from controller_client.errors import (
        ControllerError,
        ControllerTlsError,
        ControllerUnavailableError,
        ScopeNotFoundError,
        StreamNotFoundError,
        StreamSealedError,
        TxnFailedError,
        TxnNotFoundError,
    )
    from controller_client.model import (
        RetentionPolicy,
        ScalingPolicy,
        SegmentRange,
        StreamConfiguration,
        StreamCut,
        TxnState,
    )
    from controller_client.ports import ControllerApi
    from controller_client.reader_groups.group import Checkpoint, ReaderGroup
    from controller_client.reader_groups.reader import EventRead, EventStreamReader, GroupReaderConfig
    from controller_client.reader_groups.state import ReaderOfflineError
    from controller_client.readers.stream_reader import (
        StreamEvent,
        StreamReader,
        StreamReaderConfig,
        read_segment_range,
    )
    from controller_client.stream_manager import ControllerResolver, StreamManager, StreamManagerConfig
    from controller_client.writers.event_writer import EventStreamWriter, EventWriterConfig
    from controller_client.writers.routing import hash_to_range
    from controller_client.writers.txn_writer import (
        Transaction,
        TransactionalEventStreamWriter,
        TransactionClosedError,
        TxnWriterConfig,
    )

_EXPORTS = {
    "blocking": [
        "BlockingEventStreamReader",
        "BlockingEventStreamWriter",
        "BlockingReaderGroup",
        "BlockingStreamManager",
        "BlockingStreamReader",
        "BlockingTransaction",
        "BlockingTransactionalWriter",
    ],
    "controller.api": ["ControllerClient", "ControllerClientConfig"],
    "errors": [
        "ControllerError",
        "ControllerTlsError",
        "ControllerUnavailableError",
        "ScopeNotFoundError",
        "StreamNotFoundError",
        "StreamSealedError",
        "TxnFailedError",
        "TxnNotFoundError",
    ],
    "model": ["RetentionPolicy", "ScalingPolicy", "SegmentRange", "StreamConfiguration", "StreamCut", "TxnState"],
    "ports": ["ControllerApi"],
    "reader_groups.group": ["Checkpoint", "ReaderGroup"],
    "reader_groups.reader": ["EventRead", "EventStreamReader", "GroupReaderConfig"],
    "reader_groups.state": ["ReaderOfflineError"],
    "readers.stream_reader": ["StreamEvent", "StreamReader", "StreamReaderConfig", "read_segment_range"],
    "stream_manager": ["ControllerResolver", "StreamManager", "StreamManagerConfig"],
    "writers.event_writer": ["EventStreamWriter", "EventWriterConfig"],
    "writers.routing": ["hash_to_range"],
    "writers.txn_writer": [
        "Transaction",
        "TransactionClosedError",
        "TransactionalEventStreamWriter",
        "TxnWriterConfig",
    ],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "BlockingEventStreamReader",
    "BlockingEventStreamWriter",
    "BlockingReaderGroup",
    "BlockingStreamManager",
    "BlockingStreamReader",
    "BlockingTransaction",
    "BlockingTransactionalWriter",
    "Checkpoint",
    "ControllerApi",
    "ControllerClient",
    "ControllerClientConfig",
    "ControllerError",
    "ControllerResolver",
    "ControllerTlsError",
    "ControllerUnavailableError",
    "EventRead",
    "EventStreamReader",
    "EventStreamWriter",
    "EventWriterConfig",
    "GroupReaderConfig",
    "ReaderGroup",
    "ReaderOfflineError",
    "RetentionPolicy",
    "ScalingPolicy",
    "ScopeNotFoundError",
    "SegmentRange",
    "StreamConfiguration",
    "StreamCut",
    "StreamEvent",
    "StreamManager",
    "StreamManagerConfig",
    "StreamNotFoundError",
    "StreamReader",
    "StreamReaderConfig",
    "StreamSealedError",
    "Transaction",
    "TransactionClosedError",
    "TransactionalEventStreamWriter",
    "TxnFailedError",
    "TxnNotFoundError",
    "TxnState",
    "TxnWriterConfig",
    "hash_to_range",
    "read_segment_range",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'controller_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"controller_client.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
