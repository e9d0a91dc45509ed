"""The connector's connection to the cluster: a controller client and a segment client on a private event loop
thread (:class:`~segstore_shared.loop_thread.LoopThread`), with blocking calls for the driver and the executors.

The driver plans reads with it (segment statuses, successors, event starts, stream cuts through
:mod:`pravega_spark.offsets`), executors read segment ranges and their ingestion times with it
(:mod:`pravega_spark.read.partition_reader`). Failures the user can fix raise
:class:`~pravega_spark.errors.SegstoreOptionError` naming the option (``controller``, ``trustStore``, ``password``,
``token``, ``username``, ``stream``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from controller_client.controller.api import ControllerClient, ControllerClientConfig
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerError,
    ControllerPermissionError,
    ControllerTlsError,
    ControllerUnavailableError,
)
from controller_client.model import StreamCut, qualified_segment_name
from controller_client.stream_manager import StreamManager, StreamManagerConfig
from pravega_spark.errors import SegstoreOptionError, shown_alone
from segment_store.client import (
    Backoff,
    ClientClosedError,
    ClientConfig,
    ConnectionLostError,
    NoSuchSegmentError,
    OperationUnsupportedError,
    ReaderConfig,
    SegmentIsTruncatedError,
    SegmentStatus,
    StorageChunkLocations,
    WrongHostError,
)
from segstore_shared.auth.tls import TlsConfigError
from segstore_shared.loop_thread import LoopThread

_log = logging.getLogger("pravega_spark.offsets")  # its logger before it had a module of its own
_T = TypeVar("_T")
MIB = 1024 * 1024


def shipped_file(path: str | None) -> str | None:
    """The file ``path`` names as this process finds it (the ``trustStore`` of a driver and its executors).

    As given when a file is there; else the file of the same name Spark shipped to this process
    (``spark.files``, ``--files`` or ``SparkContext.addFile``: in the Python workers of the driver and of the
    executors, ``SparkFiles.getRootDirectory()``); else as given, so that reading it fails naming that path. So
    one option value works on every host of a cluster: the driver's path, or the bare name of a shipped file."""
    if path is None or os.path.isfile(path):
        return path
    try:
        from pyspark import SparkFiles
    except ImportError:  # no pyspark here: nothing shipped
        return path
    if not SparkFiles._is_running_on_worker or SparkFiles._root_directory is None:
        return path
    shipped = os.path.join(SparkFiles._root_directory, os.path.basename(path))
    return shipped if os.path.isfile(shipped) else path


class Credentials(Protocol):
    """What a connection takes of a query's target: its controller client configuration with the trust store and the
    user and password or token (:class:`~pravega_spark.options.common.StreamTarget` is one)."""

    def controller_config(self, **settings: Any) -> ControllerClientConfig: ...


class StreamConnection:
    """A controller client and a segment client on a private event loop thread, with blocking calls.

    Raises :class:`SegstoreOptionError` naming option ``controller`` when the controller cannot be reached
    within ``timeout_s`` (option ``controllerTimeoutMs``: the budget for "unreachable" of every call it makes, to
    the controller and to the segment stores). ``close()`` stops everything (the loop thread is a daemon: a process
    that exits without closing leaks nothing).
    """

    def __init__(
        self,
        controller_uri: str,
        timeout_s: float = 30.0,
        reader: ReaderConfig | None = None,
        trust_store: str | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``credentials``: the target whose trust store, user and password or token to use (instead of
        ``trust_store`` alone)."""
        self.controller_uri = controller_uri
        self._runner = LoopThread("segstore-spark", ClientClosedError)
        timeouts: dict[str, Any] = {"rpc_timeout_s": max(timeout_s, 1.0), "retry_timeout_s": timeout_s}
        if credentials is not None:
            config = credentials.controller_config(**timeouts)
        else:
            config = ControllerClientConfig(trust_store=shipped_file(trust_store), **timeouts)
        self._token_auth = config.token is not None
        self._no_ingest_times = False  # the segment store turned out not to know ReadIngestTimes
        try:
            self.controller: ControllerClient = self.run(
                ControllerClient.connect(controller_uri, config, wait_ready=True)
            )
        except TlsConfigError as error:
            self._runner.stop()
            raise SegstoreOptionError("trustStore", f"{error.path}: {error.problem}") from None
        except ControllerTlsError as error:
            self._runner.stop()
            raise SegstoreOptionError(
                "trustStore", f"TLS to the controller at {controller_uri} failed: {error}"
            ) from None
        except ControllerAuthenticationError as error:
            self._runner.stop()
            option = "token" if config.token is not None else "password"
            raise SegstoreOptionError(option, f"the controller at {controller_uri} refused it ({error})") from None
        except ControllerUnavailableError as error:  # it names the URI, what failed and what to check
            self._runner.stop()
            raise shown_alone(SegstoreOptionError("controller", str(error))) from None
        except ControllerError as error:
            self._runner.stop()
            raise SegstoreOptionError("controller", f"the controller at {controller_uri}: {error}") from None
        except BaseException:
            self._runner.stop()
            raise
        client = ClientConfig(reader=reader or ReaderConfig(read_request_bytes=MIB, prefetch_bytes=8 * MIB))
        self.manager: StreamManager = self.run(_make_manager(self.controller, StreamManagerConfig(client=client)))

    def delegation_token(self, scope: str, stream: str, write: bool) -> str:
        """A token for the executors on the stream (READ, or READ_UPDATE if ``write``)."""
        return self.run(self.controller.get_delegation_token(scope, stream, write))

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        return self._runner.run(coroutine, timeout_s)

    def close(self) -> None:
        """Close the clients and stop the loop thread. Idempotent."""
        if self._runner.loop.is_closed():
            return
        try:
            self.run(self.manager.close())
            self.run(self.controller.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> StreamConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- lookups ------------------------------------------------------------------------------------------
    def require_stream(self, scope: str, stream: str) -> None:
        """Raise SegstoreOptionError naming option ``stream`` unless ``scope/stream`` exists (``password`` or
        ``token`` if the controller refuses the credentials, ``username`` if they may not read the stream)."""
        try:
            exists = self.run(self.manager.stream_exists(scope, stream))
        except ControllerAuthenticationError as error:
            option = "token" if self._token_auth else "password"
            raise SegstoreOptionError(option, f"the controller at {self.controller_uri} refused it ({error})") from None
        except ControllerPermissionError as error:
            option = "token" if self._token_auth else "username"
            raise SegstoreOptionError(option, f"may not read {scope}/{stream}: {error}") from None
        if not exists:
            raise SegstoreOptionError(
                "stream", f"stream {scope}/{stream} does not exist (controller {self.controller_uri})"
            )

    def segment_status(self, scope: str, stream: str, segment_id: int) -> SegmentStatus | None:
        """The segment store's view of a segment; None if the segment no longer exists (truncated away)."""
        return self.segment_statuses(scope, stream, [segment_id])[segment_id]

    def segment_statuses(self, scope: str, stream: str, segment_ids: Iterable[int]) -> dict[int, SegmentStatus | None]:
        """:meth:`segment_status` of each segment, asked all at once (one round trip's time, not one per segment)."""

        async def status(segment_id: int) -> SegmentStatus | None:
            try:
                found = await self.manager.segment_info(scope, stream, segment_id)
            except NoSuchSegmentError:
                return None
            return found if found.exists and not found.deleted else None

        async def all_of(ids: list[int]) -> list[SegmentStatus | None]:
            return list(await asyncio.gather(*(status(i) for i in ids)))

        ids = list(dict.fromkeys(segment_ids))
        return dict(zip(ids, self.run(all_of(ids)), strict=True))

    def successors(self, scope: str, stream: str, segment_id: int) -> dict[int, list[int]]:
        """Successor id -> predecessor ids (empty while the segment is open, or when the stream is sealed)."""
        found = self.run(self.controller.get_successors(scope, stream, segment_id))
        return {r.segment_id: sorted(preds) for r, preds in sorted(found.items(), key=lambda i: i[0].segment_id)}

    def chunks(self, scope: str, stream: str, segment_id: int, start: int, end: int) -> Iterator[bytes]:
        """The bytes ``[start, end)`` of a segment, as the segment store returns them."""
        name = qualified_segment_name(scope, stream, segment_id)
        backoff = Backoff(self.manager.config.segment_retry, self.manager.retry_timeout_s)
        offset = start
        while True:  # read again from where it stopped after a move, with its owner looked up anew
            reader = self.manager.client.reader(name, offset, end)
            try:
                while chunk := self.run(reader.read()):
                    backoff.succeeded()
                    offset += len(chunk)
                    yield chunk
                return
            except (WrongHostError, ConnectionLostError) as error:
                _log.info("%s: reading again at %d after %r", name, offset, error)
                self.manager.invalidate_segment(name)
                self.run(backoff.failed(error))  # raises once the failures in a row outlast the budget
            finally:
                self.run(reader.close())

    def event_starts(self, scope: str, stream: str, segment_id: int, targets: Sequence[int]) -> list[int] | None:
        """Per offset of ``targets``, an event start of the segment at or after it (the first one, from a segstore
        segment store; Pravega's ``LocateOffset``, asked for all at once); None (logged) if the segment store does
        not know the command (it answers so, or closes the connection after the client's read retries: the ranges
        are then read whole, which is correct, only not parallel)."""
        name = qualified_segment_name(scope, stream, segment_id)
        client = self.manager.client

        async def locate() -> list[int]:
            return list(await asyncio.gather(*(client.locate_offset(name, t) for t in targets)))

        try:
            return self.run(self.manager.segment_call(name, locate, moved_only=True))
        except OperationUnsupportedError:
            _log.warning("%s: the segment store does not know LocateOffset; its ranges are read whole", name)
            return None
        except ConnectionLostError as error:  # a Pravega segment store older than wire version 17 hangs up on it
            _log.warning("%s: LocateOffset lost the connection (%s); its ranges are read whole", name, error)
            return None
        except (SegmentIsTruncatedError, NoSuchSegmentError) as error:  # meanwhile: the read tells (failOnDataLoss)
            _log.info("%s: %s; its ranges are read whole", name, error)
            return None

    def ingest_times(
        self, scope: str, stream: str, segment_id: int, start: int, end: int
    ) -> tuple[int, list[tuple[int, int]]] | None:
        """``(answered_end, runs)``: the ingestion times of the segment's events from ``start`` as ``(offset, ms)``
        runs (segstore's extension ``ReadIngestTimes``; see ``SegmentClient.ingest_times``). None (logged once per
        connection) if the segment store does not know it (a Pravega one hangs up on it): timestamps are then
        null. Raises SegmentIsTruncatedError, NoSuchSegmentError (as a read of the range would)."""
        if self._no_ingest_times:
            return None
        name = qualified_segment_name(scope, stream, segment_id)
        try:
            client = self.manager.client
            return self.run(
                self.manager.segment_call(name, lambda: client.ingest_times(name, start, end), moved_only=True)
            )
        except (OperationUnsupportedError, ConnectionLostError) as error:
            self._no_ingest_times = True
            _log.warning(
                "%s: the segment store does not answer segstore's ReadIngestTimes (%s): the timestamp column "
                "is null for events read through it",
                name,
                error,
            )
            return None

    # the blocking segment calls :func:`pravega_spark.read.tier2_direct.read_range` makes (segment names)
    def get_segment_info(self, segment: str) -> SegmentStatus:
        client = self.manager.client
        return self.run(self.manager.segment_call(segment, lambda: client.get_segment_info(segment)))

    def list_storage_chunk_locations(self, segment: str, start: int, end: int) -> StorageChunkLocations:
        """segstore's extension (:mod:`pravega_spark.read.tier2_locations`); a lost connection is raised (a segment
        store that does not know the extension hangs up)."""
        client = self.manager.client
        call = self.manager.segment_call
        return self.run(
            call(segment, lambda: client.list_storage_chunk_locations(segment, start, end), moved_only=True)
        )

    def list_storage_chunks(self, segment: str) -> list[Any]:
        client = self.manager.client
        return self.run(self.manager.segment_call(segment, lambda: client.list_storage_chunks(segment)))

    def is_valid_cut(self, cut: StreamCut) -> bool:
        return bool(self.run(self.controller.is_stream_cut_valid(cut)))


async def _make_manager(controller: ControllerClient, config: StreamManagerConfig) -> StreamManager:
    return StreamManager(controller, config=config)


__all__ = ["Credentials", "StreamConnection"]
