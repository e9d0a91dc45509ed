"""Client library of segstore streams: controller client, StreamManager, event writers and readers.

* :class:`StreamManager` (``stream_manager``): scopes, streams, policies, stream cuts (head, tail, at a time),
  truncation; makes the writers and readers below, all sharing one segment client whose endpoints come
  from the controller (``getURI``).
* :class:`EventStreamWriter` (``event_writer``): events routed by routing key (Pravega's hash, so the Java
  and Rust clients agree, ``routing``), per-key order, follows scaling without loss or duplicates.
* :class:`TransactionalEventStreamWriter` / :class:`Transaction` (``txn_writer``): all-or-nothing writes.
* :class:`StreamReader` (``stream_reader``): events between two stream cuts, or following the tail,
  segment by segment in successor order.
* :class:`ReaderGroup` / :class:`EventStreamReader` (``reader_group``, ``event_stream_reader``): readers in any
  processes sharing streams, each segment read by one, balanced, with checkpoints; the state is in the official
  Pravega client's format, so its readers can join our groups.
* ``blocking``: the same for threads without an event loop (:class:`BlockingStreamManager`).
* :class:`ControllerClient` (``controller_api``): the gRPC controller client; the library talks to the
  controller only through the :class:`ControllerApi` port (``ports``). ``tls://host:port`` URIs
  (``controller_channel``) use TLS to the controller and to the segment stores, trusting
  ``ControllerClientConfig.trust_store`` (the system's trust store when None).

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
    from controller_client.blocking.reader_groups import BlockingEventStreamReader, BlockingReaderGroup
    from controller_client.blocking.streams import (
        BlockingEventStreamWriter,
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
    "blocking.streams": [
        "BlockingEventStreamWriter",
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
    "writers.event_writer": ["EventStreamWriter", "EventWriterConfig"],
    "model": ["RetentionPolicy", "ScalingPolicy", "SegmentRange", "StreamConfiguration", "StreamCut", "TxnState"],
    "ports": ["ControllerApi"],
    "reader_groups.reader": ["EventRead", "EventStreamReader", "GroupReaderConfig"],
    "reader_groups.group": ["Checkpoint", "ReaderGroup"],
    "blocking.reader_groups": ["BlockingEventStreamReader", "BlockingReaderGroup"],
    "reader_groups.state": ["ReaderOfflineError"],
    "writers.routing": ["hash_to_range"],
    "stream_manager": ["ControllerResolver", "StreamManager", "StreamManagerConfig"],
    "readers.stream_reader": ["StreamEvent", "StreamReader", "StreamReaderConfig", "read_segment_range"],
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
