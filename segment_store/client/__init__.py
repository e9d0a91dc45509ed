"""Async segment client over the Pravega wire protocol, and a blocking facade.

* :class:`SegmentClient` (``raw_client``): every request/reply command (segments, attributes, tables),
  over a :class:`ConnectionPool` of multiplexed :class:`Connection` s.
* :class:`SegmentWriter` (``writer``): an append session with batching, backpressure, acks and
  resend after reconnect (no loss, no duplicates); acknowledgements as futures, or without them
  (``offer``/``put``) through a :class:`ProgressListener`; :class:`ConditionalWriter` (``conditional``)
  for appends conditioned on the segment length.
* :class:`SegmentReader` (``reader``): prefetching reads of bytes or events, tail reads.
* :class:`BlockingClient` (``sync``): all of it for threads without an event loop.
* ``errors``: typed errors, one per failure reply, through one registry.
* TLS: ``ClientConfig(connection=ConnectionConfig(tls=TrustConfig(ca_pem)))`` (``segstore_shared.auth.tls``)
  connects with TLS, checking the certificate names the endpoint's host; :class:`TlsError` when it does not fit.

Example::

    async with SegmentClient(("127.0.0.1", 12345)) as client:
        await client.create_segment("scope/stream/0")
        async with client.writer("scope/stream/0") as writer:  # close() flushes
            for i in range(1000):
                await writer.write(b"event %d" % i)  # returns the ack future; waits only for window room
        length = (await client.get_segment_info("scope/stream/0")).write_offset
        async for event in client.reader("scope/stream/0", end_offset=length):
            print(event.offset, event.data)

    with BlockingClient(("127.0.0.1", 12345)) as client:  # from a thread without an event loop
        with client.writer("scope/stream/0") as writer:
            writer.write_many([b"a", b"b"]).result()
"""

from segment_store.client.conditional import ConditionalWriter
from segment_store.client.config import ClientConfig, ConnectionConfig, PoolConfig, ReaderConfig, WriterConfig
from segment_store.client.connection import Connection, Endpoint, open_connection
from segment_store.client.errors import (
    AuthTokenCheckFailedError,
    ClientClosedError,
    ClientError,
    ConditionalCheckFailedError,
    ConnectFailedError,
    ConnectionLostError,
    ErrorMessageError,
    InvalidEventNumberError,
    NoSuchSegmentError,
    OperationUnsupportedError,
    ReplyError,
    RequestTimeoutError,
    SegmentAlreadyExistsError,
    SegmentIsSealedError,
    SegmentIsTruncatedError,
    SegmentStoreUnreachableError,
    TableKeyBadVersionReplyError,
    TableKeyDoesNotExistReplyError,
    TableSegmentNotEmptyReplyError,
    TlsError,
    UnexpectedReplyError,
    WrongHostError,
    error_for_reply,
)
from segment_store.client.pool import ConnectionPool
from segment_store.client.raw_client import SegmentClient
from segment_store.client.reader import SegmentReader
from segment_store.client.results import (
    NO_VERSION,
    NOT_EXISTS,
    DeltaPage,
    EntriesPage,
    KeysPage,
    ReadSegmentResult,
    SegmentStatus,
    StorageChunkLocations,
    StoredChunk,
    TableSegmentStatus,
    VersionedEntry,
    VersionedKey,
)
from segment_store.client.retry import Backoff, RetryPolicy
from segment_store.client.sync import BlockingClient, BlockingConditionalWriter, BlockingReader, BlockingWriter
from segment_store.client.writer import ProgressListener, SegmentWriter

__all__ = [
    "NOT_EXISTS",
    "NO_VERSION",
    "AuthTokenCheckFailedError",
    "Backoff",
    "BlockingClient",
    "BlockingConditionalWriter",
    "BlockingReader",
    "BlockingWriter",
    "ClientClosedError",
    "ClientConfig",
    "ClientError",
    "ConditionalCheckFailedError",
    "ConditionalWriter",
    "ConnectFailedError",
    "Connection",
    "ConnectionConfig",
    "ConnectionLostError",
    "ConnectionPool",
    "DeltaPage",
    "Endpoint",
    "EntriesPage",
    "ErrorMessageError",
    "InvalidEventNumberError",
    "KeysPage",
    "NoSuchSegmentError",
    "OperationUnsupportedError",
    "PoolConfig",
    "ProgressListener",
    "ReadSegmentResult",
    "ReaderConfig",
    "ReplyError",
    "RequestTimeoutError",
    "RetryPolicy",
    "SegmentAlreadyExistsError",
    "SegmentClient",
    "SegmentIsSealedError",
    "SegmentIsTruncatedError",
    "SegmentReader",
    "SegmentStatus",
    "SegmentStoreUnreachableError",
    "SegmentWriter",
    "StorageChunkLocations",
    "StoredChunk",
    "TableKeyBadVersionReplyError",
    "TableKeyDoesNotExistReplyError",
    "TableSegmentNotEmptyReplyError",
    "TableSegmentStatus",
    "TlsError",
    "UnexpectedReplyError",
    "VersionedEntry",
    "VersionedKey",
    "WriterConfig",
    "WrongHostError",
    "error_for_reply",
    "open_connection",
]
