"""Shared helpers of the system journal tests: a manual clock, an environment to (re)open storages, record helpers."""

from __future__ import annotations

from collections.abc import Callable

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage, ChunkStorageUnavailableError
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.journal.records import (
    HEADER,
    JournalRecord,
    SnapshotRecord,
    encode_record,
    system_prefix,
)
from segment_store.storage.journal.system_journal import (
    InMemorySnapshotInfoStore,
    SnapshotInfo,
)
from segment_store.storage.storage_config import ChunkedStorageConfig

CID = 3


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Env:
    """Chunk storage (with fault injection) + pointer store + clock shared by successive owners."""

    def __init__(self, chunks: ChunkStorage | None = None, **config: object) -> None:
        self.faulty = FaultyChunkStorage(chunks or MemoryChunkStorage())
        self.pointer = InMemorySnapshotInfoStore(CID)
        self.clock = ManualClock()
        settings: dict[str, object] = {"retry_delay_s": 0.0}
        settings.update(config)
        self.config = ChunkedStorageConfig(**settings)  # type: ignore[arg-type]

    async def open(self, epoch: int, **config: object) -> ChunkedSegmentStorage:
        cfg = ChunkedStorageConfig(**{**_fields(self.config), **config}) if config else self.config
        storage = ChunkedSegmentStorage(self.faulty, CID, self.pointer, cfg, clock=self.clock)
        await storage.open(epoch)
        return storage

    def names(self, kind: str) -> list[str]:
        prefix = data_prefix(CID) if kind == "data" else system_prefix(CID, kind)  # type: ignore[arg-type]
        return list(self.faulty.inner.list(prefix))

    def written(self, prefix: str = "") -> list[str]:
        return [name for op, name in self.faulty.calls if op == "write_chunk" and name.startswith(prefix)]


def _fields(config: ChunkedStorageConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


class FlakyPointerStore(InMemorySnapshotInfoStore):
    def __init__(self) -> None:
        super().__init__(CID)
        self.fail_saves = False

    async def save(self, info: SnapshotInfo) -> None:
        if self.fail_saves:
            raise ChunkStorageUnavailableError("pointer", "injected")
        await super().save(info)


async def describe(storage: ChunkedSegmentStorage) -> dict[str, tuple[object, ...]]:
    """Everything observable about every segment the journal knows."""
    out: dict[str, tuple[object, ...]] = {}
    for seg in storage.journal.metadata:
        content = await storage.read(seg.name, seg.start_offset, seg.length - seg.start_offset)
        out[seg.name] = (seg.framing, seg.sealed, seg.start_offset, seg.length, tuple(seg.chunks), content)
    return out


async def put_record(env: Env, record: JournalRecord | SnapshotRecord, data: bytes | None = None) -> str:
    env.faulty.inner.write_chunk(record.name, encode_record(record) if data is None else data)
    return record.name


# -- record format ---------------------------------------------------------------------------


def _corruptions() -> list[tuple[str, Callable[[bytes], bytes]]]:
    def flip(data: bytes) -> bytes:
        return data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]

    def relength(data: bytes) -> bytes:
        magic, version, length, crc = HEADER.unpack_from(data)
        return HEADER.pack(magic, version, length + 1, crc) + data[HEADER.size :]

    def flip_in_string(data: bytes) -> bytes:  # still valid JSON: only the CRC can tell
        at = data.index(b'"segment":"') + len(b'"segment":"')
        return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]

    return [
        ("flipped-bit-in-string", flip_in_string),
        ("truncated", lambda d: d[: len(d) // 2]),
        ("header-only", lambda d: d[: HEADER.size]),
        ("shorter-than-header", lambda d: d[:5]),
        ("empty", lambda d: b""),
        ("flipped-bit", flip),
        ("trailing-garbage", lambda d: d + b"\x00"),
        ("length-lies", relength),
        ("bad-magic", lambda d: b"XXXX" + d[4:]),
        ("bad-version", lambda d: d[:4] + b"\x09" + d[5:]),
    ]
