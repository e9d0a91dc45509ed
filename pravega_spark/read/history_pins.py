"""The chunk files of a history read, listed with their names and pinned while the read runs.

:func:`list_chunk_files` asks a segment's store where its Tier-2 chunks are (segstore's
``ListStorageChunkLocations``), keeping each chunk's name, which :func:`pin_files` then pins (``PinChunks``) for
every segment whose files the read uses. The pins (:class:`HeldPins`) live ``ttl_ms`` and are renewed every
half of that by a daemon thread until :meth:`HeldPins.release` (``UnpinChunks``). A listing is pinned within
milliseconds, far below the segment store's garbage collection delay, so a chunk compacted away in between is
still there when its pin lands; from then on it stays until the pin ends.

A renewal that fails is logged and tried again at the next tick: the pin still holds until its expiry.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from controller_client.model import qualified_segment_name
from pravega_spark.connection import StreamConnection
from pravega_spark.read.history_plan import ChunkFile, HistoryPlan
from pravega_spark.read.tier2_locations import s3_uri
from segment_store.client import ConnectionLostError, ReplyError
from segment_store.protocol import MAX_LISTED_CHUNKS, TIER2_FILE, TIER2_S3

_log = logging.getLogger(__name__)

DEFAULT_PIN_TTL_MS = 120_000
"""How long a history read's pins live without renewal (option ``pinTtlMs``)."""
_END = 2**63 - 1


def list_chunk_files(connection: StreamConnection, segment: str, s3a: bool) -> list[ChunkFile]:
    """The contiguous chunks of ``segment`` (qualified name) this process can hand to Spark, from its first one:
    files (``file://`` URIs) always, S3 objects (``s3://bucket/key``) only if ``s3a``. Empty if the segment store
    does not know the extension or the segment is gone."""
    client = connection.manager.client
    files: list[ChunkFile] = []
    offset = 0
    while True:
        try:
            located = connection.run(client.list_storage_chunk_locations(segment, offset, _END))
        except (ReplyError, ConnectionLostError) as error:
            _log.info("%s: no chunk locations (%s); read by the segstore source", segment, error)
            return files
        for chunk in located.chunks:
            if located.kind == TIER2_FILE and os.path.isabs(chunk.path):
                uri = Path(chunk.path).as_uri()
            elif located.kind == TIER2_S3 and located.bucket and s3a:
                uri = s3_uri(located.bucket, chunk.path, "")
            else:
                return files
            if files and files[-1].end != chunk.start_offset:
                return files
            files.append(ChunkFile(chunk.start_offset, chunk.length, uri, chunk.chunk_name))
        if len(located.chunks) < MAX_LISTED_CHUNKS or not files:
            return files
        offset = files[-1].end


class HeldPins:
    """Pins of one history read, renewed in the background until :meth:`release` (idempotent)."""

    def __init__(
        self, connection: StreamConnection, pin_id: str, held: Mapping[str, Sequence[str]], ttl_ms: int
    ) -> None:
        self.connection = connection
        self.pin_id = pin_id
        self.held = dict(held)
        """Qualified segment name -> the chunk names pinned."""
        self.ttl_ms = ttl_ms
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name=f"history-pins-{pin_id[:8]}", daemon=True)

    def pin_all(self) -> None:
        """Pin (or renew) every segment's chunks. Raises what the segment client raises."""
        client = self.connection.manager.client
        for segment, chunks in self.held.items():
            self.connection.run(client.pin_chunks(segment, self.pin_id, chunks, self.ttl_ms))

    def start(self) -> None:
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_ms / 2000.0):
            try:
                self.pin_all()
                self.renewals += 1
            except (ReplyError, ConnectionLostError, TimeoutError) as error:
                _log.warning("history pins %s: renewal failed (held until expiry, tried again): %s", self.pin_id, error)

    def abandon(self) -> None:
        """Stop renewing without ending the pins (they expire ``ttl_ms`` after the last renewal), as a driver that
        dies would; the connection is closed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.connection.close()

    def release(self) -> None:
        """Stop renewing and end the pins now; the connection is closed. Failures are logged (the pins expire)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            self.unpin_all()
        finally:
            self.connection.close()

    def unpin_all(self) -> None:
        """End every pin now (those not held are skipped); failures are logged (the pins expire)."""
        client = self.connection.manager.client
        try:
            for segment in self.held:
                self.connection.run(client.unpin_chunks(segment, self.pin_id))
        except (ReplyError, ConnectionLostError, TimeoutError) as error:
            _log.warning("history pins %s: release failed (they expire in %d ms): %s", self.pin_id, self.ttl_ms, error)


def pin_files(connection: StreamConnection, scope: str, stream: str, plan: HistoryPlan, ttl_ms: int) -> HeldPins | None:
    """Pin the chunks of ``plan``'s files (None if it has none) and start renewing them; the pins own
    ``connection`` from then on (closed by :meth:`HeldPins.release`). Raises ErrorMessageError if the segment
    store refuses a chunk that is no longer there (compacted and collected since it was listed: plan again);
    what was pinned is released first."""
    held: dict[str, list[str]] = defaultdict(list)
    for file in plan.files:
        held[qualified_segment_name(scope, stream, file.segment_id)].append(file.name)
    if not held:
        return None
    pins = HeldPins(connection, uuid.uuid4().hex, held, ttl_ms)
    try:
        pins.pin_all()
    except BaseException:
        pins.unpin_all()
        raise
    pins.start()
    return pins


__all__ = ["DEFAULT_PIN_TTL_MS", "HeldPins", "list_chunk_files", "pin_files"]
