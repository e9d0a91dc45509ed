"""Node layout and shared record access of the stream metadata store.

Layout under the root (default ``/controller``); ``<q:x>`` is ``x`` escaped into one node name::

    scopes/<scope>                          scope node ({"v":1})
      S-<stream>                            StreamRecord (created first, deleted last)
        config state current transition     ConfigurationRecord, StreamState, EpochRecord (the active
        truncation committing retention     epoch's copy), EpochTransitionRecord, TruncationRecord,
        txn_order                           CommittingTxnsRecord, RetentionSet, commit order counter
        epochs/<n>                          EpochRecord (immutable)
        history/<chunk>                     HistoryChunk (epoch, reference, creation time per epoch)
        sealed/<shard>                      SealedSizesShard (segments created in a range of epochs)
        cuts/<recording time>               StreamCutRecord (immutable)
        txns/<epoch>/<txn hex>              ActiveTxnRecord
        completed/<txn hex>                 CompletedTxnRecord
        writers/<q:writer>                  WriterMark
        subscribers/<q:scope/group>         SubscriberRecord
      R-<reader group>                      ReaderGroupConfigRecord
      K-<kv table>                          (key-value tables, owned elsewhere; only block scope deletion)
      T-<q:tag>/<stream>                    tag index

Everything of a scope lives under the scope node, so deleting the scope node is the atomic "is it
empty" check. Reads of mutable records return ``(record, version)``; writes are single-node
creates or compare-and-sets.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote, unquote

from controller.metadata.codec import decode, encode
from controller.metadata.errors import (
    DataNotFoundError,
    InvalidStreamCutError,
    StreamNotFoundError,
    WriteConflictError,
)
from controller.metadata.records import (
    EpochRecord,
    HistoryChunk,
    HistoryEntry,
    SealedSizesShard,
    SegmentRecord,
    StreamRecord,
    StreamState,
)
from controller.metadata.stream_logic import cut_epoch_bounds, cut_records, is_stream_cut_valid
from controller_client.model import creation_epoch
from segstore_shared.coordination.store import (
    BadVersionError,
    CoordinationStore,
    NodeExistsError,
    NodeNotFoundError,
    NotEmptyError,
    validate_path,
)

T = TypeVar("T")
STREAM_PREFIX = "S-"
READER_GROUP_PREFIX = "R-"
KV_TABLE_PREFIX = "K-"
TAG_PREFIX = "T-"
SCOPE_DATA = b'{"v":1}'


@dataclass(frozen=True, slots=True)
class MetadataStoreConfig:
    """Tuning of the metadata store; defaults are Pravega's where it has one."""

    epoch_cache_entries: int = 10_000
    sealed_shard_epochs: int = 1000
    history_chunk_epochs: int = 1000
    update_attempts: int = 50
    read_batch: int = 64

    def __post_init__(self) -> None:
        for name in ("epoch_cache_entries", "sealed_shard_epochs", "history_chunk_epochs", "update_attempts"):
            if getattr(self, name) <= 0:
                raise ValueError(f"metadata store config: {name} must be positive")
        if self.read_batch <= 0:
            raise ValueError("metadata store config: read_batch must be positive")


def escape(name: str) -> str:
    """``name`` as one node name (no ``/``, never ``.`` or ``..``)."""
    return quote(name, safe="").replace(".", "%2E")


def unescape(node: str) -> str:
    return unquote(node)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class StoreBase:
    """Paths, codec-aware node access and the reads every part of the store shares."""

    def __init__(
        self,
        coordination: CoordinationStore,
        root: str = "/controller",
        *,
        config: MetadataStoreConfig | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        validate_path(root)
        self._coord = coordination
        self._root = "" if root == "/" else root
        self._config = config or MetadataStoreConfig()
        self._clock_ms = clock_ms or _wall_clock_ms
        self._epoch_cache: OrderedDict[tuple[str, str, str, int], EpochRecord] = OrderedDict()

    # ---- paths ------------------------------------------------------------------------------------------------
    @property
    def _scopes_path(self) -> str:
        return f"{self._root}/scopes"

    def _scope_path(self, scope: str) -> str:
        return f"{self._root}/scopes/{scope}"

    def _stream_path(self, scope: str, stream: str) -> str:
        return f"{self._root}/scopes/{scope}/{STREAM_PREFIX}{stream}"

    def _sp(self, scope: str, stream: str, *parts: object) -> str:
        return "/".join([self._stream_path(scope, stream), *(str(p) for p in parts)])

    def _tag_path(self, scope: str, tag: str) -> str:
        return f"{self._scope_path(scope)}/{TAG_PREFIX}{escape(tag)}"

    def _rg_path(self, scope: str, group: str) -> str:
        return f"{self._scope_path(scope)}/{READER_GROUP_PREFIX}{group}"

    # ---- generic node access ----------------------------------------------------------------------------------
    async def _get(self, path: str, cls: type[T]) -> tuple[T, int]:
        """Record and version at ``path``; raises ``NodeNotFoundError``."""
        node = await self._coord.get(path)
        return decode(cls, node.data), node.version

    async def _get_opt(self, path: str, cls: type[T]) -> tuple[T, int] | None:
        try:
            return await self._get(path, cls)
        except NodeNotFoundError:
            return None

    async def _create(self, path: str, record: object, *, make_parents: bool = False) -> bool:
        """Create ``path``; ``False`` if it existed already (its content is left alone)."""
        try:
            await self._coord.create(path, encode(record), make_parents=make_parents)
        except NodeExistsError:
            return False
        return True

    async def _create_in_stream(self, scope: str, stream: str, path: str, record: object | bytes) -> bool:
        """Create a node under an existing stream (parents are never created, so a deleted stream is
        never resurrected); ``False`` if it existed; :class:`StreamNotFoundError` if the stream is gone."""
        data = record if isinstance(record, bytes) else encode(record)
        try:
            await self._coord.create(path, data, make_parents=False)
        except NodeExistsError:
            return False
        except NodeNotFoundError:
            await self._stream(scope, stream)
            raise DataNotFoundError(f"parent of {path} not found", scope=scope, name=stream) from None
        return True

    async def _cas(self, path: str, record: object, version: int, *, scope: str, name: str, what: str) -> int:
        """Compare-and-set; :class:`WriteConflictError` on a version mismatch."""
        try:
            return await self._coord.compare_and_set(path, encode(record), version)
        except BadVersionError:
            raise WriteConflictError(
                f"{what} changed concurrently (expected version {version})", scope=scope, name=name
            ) from None
        except NodeNotFoundError:
            raise DataNotFoundError(f"{what} not found", scope=scope, name=name) from None

    async def _update(
        self, path: str, cls: type[T], change: Callable[[T], T | None], *, scope: str, name: str, what: str
    ) -> T:
        """Re-read and compare-and-set until ``change`` applies (it returns ``None`` for "no change").

        Only for changes that are correct on any version (merges, appends, idempotent moves);
        raises :class:`WriteConflictError` after ``update_attempts`` lost races.
        """
        for _ in range(self._config.update_attempts):
            try:
                record, version = await self._get(path, cls)
            except NodeNotFoundError:
                raise DataNotFoundError(f"{what} not found", scope=scope, name=name) from None
            new = change(record)
            if new is None or new == record:
                return record
            try:
                await self._coord.compare_and_set(path, encode(new), version)
            except BadVersionError:
                continue
            return new
        raise WriteConflictError(f"{what}: too many concurrent updates", scope=scope, name=name)

    async def _delete_tree(self, path: str) -> None:
        """Delete ``path`` and everything below it; missing nodes are fine (resumable)."""
        for _ in range(self._config.update_attempts):
            try:
                children = await self._coord.children(path)
            except NodeNotFoundError:
                return
            for child in children:
                await self._delete_tree(f"{path}/{child}")
            try:
                await self._coord.delete(path)
                return
            except NodeNotFoundError:
                return
            except NotEmptyError:  # a child appeared concurrently; go again
                continue
        raise WriteConflictError(f"cannot delete {path}: children keep appearing")

    # ---- streams ----------------------------------------------------------------------------------------------
    async def _stream(self, scope: str, stream: str) -> StreamRecord:
        """The stream's root record; :class:`StreamNotFoundError` if there is none."""
        try:
            record, _ = await self._get(self._stream_path(scope, stream), StreamRecord)
        except NodeNotFoundError:
            raise StreamNotFoundError("stream not found", scope=scope, name=stream) from None
        return record

    async def _stream_get(self, scope: str, stream: str, sub: str, cls: type[T]) -> tuple[T, int]:
        """A stream record and its version; :class:`StreamNotFoundError` / :class:`DataNotFoundError`."""
        try:
            return await self._get(self._sp(scope, stream, sub), cls)
        except NodeNotFoundError:
            await self._stream(scope, stream)
            raise DataNotFoundError(f"{sub} record not found", scope=scope, name=stream) from None

    async def stream_exists(self, scope: str, stream: str) -> bool:
        return await self._coord.exists(self._stream_path(scope, stream))

    async def get_state_versioned(self, scope: str, stream: str) -> tuple[StreamState, int]:
        """The stream state and the version to pass to ``set_state(expected_version=...)``."""
        return await self._stream_get(scope, stream, "state", StreamState)

    async def get_state(self, scope: str, stream: str) -> StreamState:
        return (await self.get_state_versioned(scope, stream))[0]

    # ---- epochs -----------------------------------------------------------------------------------------------
    async def _epoch(self, scope: str, stream: str, uid: str, epoch: int) -> EpochRecord:
        key = (scope, stream, uid, epoch)
        cached = self._epoch_cache.get(key)
        if cached is not None:
            self._epoch_cache.move_to_end(key)
            return cached
        try:
            record, _ = await self._get(self._sp(scope, stream, "epochs", epoch), EpochRecord)
        except NodeNotFoundError:
            raise DataNotFoundError(f"epoch {epoch} not found", scope=scope, name=stream) from None
        self._epoch_cache[key] = record
        while len(self._epoch_cache) > self._config.epoch_cache_entries:
            self._epoch_cache.popitem(last=False)
        return record

    async def _epochs(self, scope: str, stream: str, uid: str, low: int, high: int) -> dict[int, EpochRecord]:
        """Epochs ``low..high`` inclusive, read in concurrent batches."""
        result: dict[int, EpochRecord] = {}
        numbers = list(range(low, high + 1))
        batch = self._config.read_batch
        for i in range(0, len(numbers), batch):
            chunk = numbers[i : i + batch]
            records = await asyncio.gather(*(self._epoch(scope, stream, uid, n) for n in chunk))
            result.update(zip(chunk, records, strict=True))
        return result

    async def get_epoch(self, scope: str, stream: str, epoch: int) -> EpochRecord:
        """Epoch record ``epoch`` (:class:`DataNotFoundError` if it does not exist)."""
        uid = (await self._stream(scope, stream)).uid
        return await self._epoch(scope, stream, uid, epoch)

    async def _current(self, scope: str, stream: str) -> tuple[EpochRecord, int]:
        return await self._stream_get(scope, stream, "current", EpochRecord)

    async def get_active_epoch(self, scope: str, stream: str) -> EpochRecord:
        """The ``currentEpoch`` record: the epoch writers append to."""
        return (await self._current(scope, stream))[0]

    async def _latest_epoch(self, scope: str, stream: str, current: int) -> int:
        """The highest epoch written: ``current`` or up to two beyond it while a scale or a rolling
        transaction has written its epochs but not yet moved ``current``."""
        latest = current
        while await self._coord.exists(self._sp(scope, stream, "epochs", latest + 1)):
            latest += 1
        return latest

    async def _sealed_epoch(self, scope: str, stream: str, uid: str, segment: int, latest: int) -> int | None:
        """The first epoch without ``segment`` (it is in every epoch from its creation up to that one),
        or ``None`` if it is in ``latest``."""
        lo, hi = creation_epoch(segment) + 1, latest
        if lo > hi or (await self._epoch(scope, stream, uid, hi)).contains(segment):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if (await self._epoch(scope, stream, uid, mid)).contains(segment):
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def _update_current_epoch(self, scope: str, stream: str, uid: str, new_epoch: int) -> EpochRecord:
        """Move ``current`` forward to ``new_epoch`` (a no-op if it is there or beyond)."""
        record = await self._epoch(scope, stream, uid, new_epoch)
        return await self._update(
            self._sp(scope, stream, "current"),
            EpochRecord,
            lambda cur: record if cur.epoch < new_epoch else None,
            scope=scope,
            name=stream,
            what="current epoch",
        )

    # ---- history ----------------------------------------------------------------------------------------------
    async def _append_history(self, scope: str, stream: str, entry: HistoryEntry) -> None:
        """Append ``entry`` to its history chunk unless the chunk already reaches its epoch."""
        chunk = entry.epoch // self._config.history_chunk_epochs
        path = self._sp(scope, stream, "history", chunk)
        for _ in range(self._config.update_attempts):
            found = await self._get_opt(path, HistoryChunk)
            if found is None:
                if await self._create_in_stream(scope, stream, path, HistoryChunk(chunk, (entry,))):
                    return
                continue
            record, version = found
            if record.entries and record.entries[-1].epoch >= entry.epoch:
                return
            try:
                await self._coord.compare_and_set(path, encode(HistoryChunk(chunk, (*record.entries, entry))), version)
                return
            except BadVersionError:
                continue
        raise WriteConflictError("history: too many concurrent updates", scope=scope, name=stream)

    async def _history(self, scope: str, stream: str, upto_epoch: int) -> list[HistoryEntry]:
        chunks = range(upto_epoch // self._config.history_chunk_epochs + 1)
        found = await asyncio.gather(
            *(self._get_opt(self._sp(scope, stream, "history", c), HistoryChunk) for c in chunks)
        )
        return [e for item in found if item is not None for e in item[0].entries if e.epoch <= upto_epoch]

    # ---- sealed sizes -----------------------------------------------------------------------------------------
    def _shard(self, segment: int) -> int:
        return creation_epoch(segment) // self._config.sealed_shard_epochs

    async def _sealed_sizes(self, scope: str, stream: str, segments: Iterable[int]) -> dict[int, int]:
        shards = sorted({self._shard(s) for s in segments})
        found = await asyncio.gather(
            *(self._get_opt(self._sp(scope, stream, "sealed", s), SealedSizesShard) for s in shards)
        )
        sizes: dict[int, int] = {}
        for item in found:
            if item is not None:
                sizes.update(item[0].sizes)
        return sizes

    async def _record_sealed_sizes(self, scope: str, stream: str, sizes: Mapping[int, int]) -> None:
        """Add sizes to their shards; a size already recorded for a segment is kept (idempotent)."""
        by_shard: dict[int, dict[int, int]] = {}
        for segment, size in sizes.items():
            by_shard.setdefault(self._shard(segment), {})[segment] = size
        for shard, part in sorted(by_shard.items()):
            path = self._sp(scope, stream, "sealed", shard)
            if await self._create_in_stream(scope, stream, path, SealedSizesShard(shard, part)):
                continue

            def merge(record: SealedSizesShard, part: dict[int, int] = part) -> SealedSizesShard | None:
                missing = {k: v for k, v in part.items() if k not in record.sizes}
                return SealedSizesShard(record.shard, {**record.sizes, **missing}) if missing else None

            await self._update(path, SealedSizesShard, merge, scope=scope, name=stream, what="sealed sizes")

    # ---- stream cuts ------------------------------------------------------------------------------------------
    async def _cut_epochs(self, scope: str, stream: str, uid: str, cut: Mapping[int, int]) -> dict[int, EpochRecord]:
        """The epochs spanned by ``cut`` (lowest to highest creation epoch of its segments);
        :class:`InvalidStreamCutError` if one of them does not exist."""
        if not cut:
            raise InvalidStreamCutError("stream cut is empty", scope=scope, name=stream)
        low, high = cut_epoch_bounds(cut)
        try:
            return await self._epochs(scope, stream, uid, low, high)
        except DataNotFoundError:
            raise InvalidStreamCutError(
                "stream cut names segments of epochs that do not exist", scope=scope, name=stream
            ) from None

    async def _valid_cut(
        self, scope: str, stream: str, uid: str, cut: Mapping[int, int]
    ) -> tuple[dict[int, SegmentRecord], dict[int, EpochRecord]]:
        """The segment records and epochs of a valid ``cut``; :class:`InvalidStreamCutError` otherwise."""
        epochs = await self._cut_epochs(scope, stream, uid, cut)
        records = cut_records(cut, epochs)
        if records is None or not is_stream_cut_valid(cut, epochs):
            raise InvalidStreamCutError(f"invalid stream cut {dict(cut)}", scope=scope, name=stream)
        return records, epochs
