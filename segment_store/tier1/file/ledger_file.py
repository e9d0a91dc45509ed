"""Ledger files: the on-disk entry format, the file operations, writing, recovery and reading.

A ledger is one file ``<ledger_id:012d>-e<epoch>.ledger`` written by exactly one owner
(the epoch is in the name, so owners of different epochs never share a file). Layout::

    file header (32 bytes): magic b"SSLEDGR1" | ledger_id u64 | epoch u64 | crc32 u32 | pad
    entry*:  length u32 | crc32 u32 | entry_id u64 | group_start u64 | payload[length]

All integers are big-endian. An entry's CRC covers ``length``, ``entry_id``,
``group_start`` and the payload, so a flipped length is caught too. Entry ids start at 0
and increase by one. ``group_start`` is the first entry id of the group commit the entry
belongs to: the writer writes a group only after the previous group was fsync'd, so a
valid entry proves that *every entry before its group_start was durable* when it was
written. Recovery uses that to tell a torn tail (a group that never finished syncing;
never acknowledged; cut off) from damage to synced data (DataLogCorruptedError).

All functions here block; the log runs them in its writer thread or a worker thread.
File operations go through :class:`LedgerStorage` so tests can wrap the real ones to
inject faults.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import struct
import time
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from segment_store.tier1.log import DataLogCorruptedError
from segstore_shared.loop_stalls import ACTIVITY

_log = logging.getLogger(__name__)

FILE_MAGIC = b"SSLEDGR1"
FILE_HEADER = struct.Struct(">8sQQI4x")
ENTRY_HEADER = struct.Struct(">IIQQ")
_ENTRY_CRC_FIELDS = struct.Struct(">IQQ")
_ENTRY_ID_OFFSET = 8  # entry_id's offset inside ENTRY_HEADER
_IOV_MAX = 1024
# How many following entry ids recovery looks for after a bad entry, to prove it was synced.
_PROOF_SEARCH_IDS = 64
_PROOF_MAX_CANDIDATES = 1024  # byte matches of one id examined before giving up
_NAME = re.compile(r"^(\d{12})-e(\d+)\.ledger$")


def ledger_file_name(ledger_id: int, epoch: int) -> str:
    return f"{ledger_id:012d}-e{epoch}.ledger"


def parse_ledger_file_name(name: str) -> tuple[int, int] | None:
    """``(ledger_id, epoch)`` of a ledger file name, ``None`` for any other name."""
    match = _NAME.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def file_header(ledger_id: int, epoch: int) -> bytes:
    crc = zlib.crc32(FILE_MAGIC + ledger_id.to_bytes(8, "big") + epoch.to_bytes(8, "big"))
    return FILE_HEADER.pack(FILE_MAGIC, ledger_id, epoch, crc)


def entry_header(payload: bytes | memoryview, entry_id: int, group_start: int) -> bytes:
    length = len(payload)
    crc = zlib.crc32(payload, zlib.crc32(_ENTRY_CRC_FIELDS.pack(length, entry_id, group_start)))
    return ENTRY_HEADER.pack(length, crc, entry_id, group_start)


class LedgerSink(Protocol):
    """An open ledger file being appended to."""

    def write(self, buffers: Sequence[bytes | memoryview]) -> None:
        """Append all ``buffers`` in order (loops over short writes); raises ``OSError``."""
        ...

    def sync(self) -> None:
        """Make everything written so far durable; raises ``OSError``."""
        ...

    def close(self) -> None: ...


class LedgerStorage(Protocol):
    """The file operations a file ledger log needs (all blocking, all may raise ``OSError``)."""

    def make_directory(self, path: Path) -> None: ...

    def create(self, path: Path) -> LedgerSink:
        """Create a new file exclusively (``FileExistsError`` if it exists)."""
        ...

    def open_read(self, path: Path) -> BinaryIO: ...

    def sync_directory(self, path: Path) -> None: ...

    def sync_file(self, path: Path) -> None:
        """Make the file's written data durable, whoever wrote it (fsync of a read-only fd)."""
        ...

    def delete(self, path: Path) -> None: ...

    def list_directory(self, path: Path) -> list[str]: ...


def unreferenced_ledger_files(
    storage: LedgerStorage, directory: Path, referenced: set[tuple[int, int]], epoch: int
) -> list[Path]:
    """The ledger files in ``directory`` of epochs before ``epoch`` that ``referenced`` (``(ledger_id, epoch)``
    pairs: the log metadata's ledgers) does not name: nobody can need them."""
    names = [(name, parse_ledger_file_name(name)) for name in storage.list_directory(directory)]
    return [directory / name for name, key in names if key is not None and key not in referenced and key[1] < epoch]


def delete_ledger_files(storage: LedgerStorage, paths: Iterable[Path], log_name: str) -> None:
    """Delete ``paths``; one that cannot be deleted is logged and left (a later collection tries again)."""
    for path in paths:
        try:
            storage.delete(path)
        except OSError as exc:
            _log.warning("log %s: could not delete ledger file %s: %s", log_name, path.name, exc)


class _OsSink:
    def __init__(self, fd: int, fsync: bool) -> None:
        self._fd = fd
        self._fsync = fsync

    def write(self, buffers: Sequence[bytes | memoryview]) -> None:
        views = [memoryview(buffer) for buffer in buffers if len(buffer)]
        index = 0
        while index < len(views):
            written = os.writev(self._fd, views[index : index + _IOV_MAX])
            while written > 0:
                head = views[index]
                if written >= len(head):
                    written -= len(head)
                    index += 1
                else:
                    views[index] = head[written:]
                    written = 0

    def sync(self) -> None:
        if self._fsync:
            started = time.perf_counter()
            os.fdatasync(self._fd)
            ACTIVITY.note("tier1_fsync", started, time.perf_counter())

    def close(self) -> None:
        os.close(self._fd)


class OsLedgerStorage:
    """:class:`LedgerStorage` on the local file system; ``fsync=False`` skips every sync."""

    def __init__(self, *, fsync: bool = True) -> None:
        self.fsync = fsync

    def make_directory(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def create(self, path: Path) -> LedgerSink:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        return _OsSink(fd, self.fsync)

    def open_read(self, path: Path) -> BinaryIO:
        return open(path, "rb")

    def sync_directory(self, path: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_file(self, path: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, path: Path) -> None:
        path.unlink()

    def list_directory(self, path: Path) -> list[str]:
        return sorted(os.listdir(path))


class LedgerWriter:
    """Appends group commits to one ledger file (used by one thread at a time)."""

    def __init__(self, sink: LedgerSink, path: Path, ledger_id: int, epoch: int) -> None:
        self.path = path
        self.ledger_id = ledger_id
        self.epoch = epoch
        self.next_entry_id = 0
        self.size_bytes = FILE_HEADER.size
        self._sink = sink

    @classmethod
    def create(cls, storage: LedgerStorage, directory: Path, ledger_id: int, epoch: int) -> LedgerWriter:
        """Create the file, write and sync its header, then sync the directory entry.

        Once this returns, the file survives a crash, so metadata may point to it.
        """
        path = directory / ledger_file_name(ledger_id, epoch)
        sink = storage.create(path)
        try:
            sink.write([file_header(ledger_id, epoch)])
            sink.sync()
            storage.sync_directory(directory)
        except BaseException:
            sink.close()
            raise
        return cls(sink, path, ledger_id, epoch)

    def write_group(self, payloads: Sequence[bytes]) -> int:
        """Write ``payloads`` as consecutive entries with one write and one sync.

        Returns the first entry id. Raises ``OSError``; after a failure the writer must not
        be used again (what reached the file is then unknown).
        """
        first = self.next_entry_id
        buffers: list[bytes | memoryview] = []
        size = 0
        started = time.perf_counter()
        for offset, payload in enumerate(payloads):
            buffers.append(entry_header(payload, first + offset, first))
            buffers.append(payload)
            size += ENTRY_HEADER.size + len(payload)
        checksummed = time.perf_counter()
        ACTIVITY.note("tier1_crc", started, checksummed)
        self._sink.write(buffers)
        ACTIVITY.note("tier1_write", checksummed, time.perf_counter())
        self._sink.sync()
        self.next_entry_id = first + len(payloads)
        self.size_bytes += size
        return first

    def close(self) -> None:
        self._sink.close()


class LedgerReader:
    """Reads one ledger file (mapped into memory) entry by entry from the start."""

    def __init__(self, storage: LedgerStorage, path: Path, ledger_id: int, epoch: int) -> None:
        """Open and check the file header; raises :class:`DataLogCorruptedError` if the
        file is missing or its header is wrong (the header was synced before any metadata
        pointed to the file, so neither can happen to an intact ledger)."""
        self.path = path
        try:
            self._file = storage.open_read(path)
        except FileNotFoundError as exc:
            raise DataLogCorruptedError(f"ledger file {path} is missing") from exc
        self._map: mmap.mmap | None = None
        self._view = memoryview(b"")
        try:
            size = os.fstat(self._file.fileno()).st_size
            if size >= FILE_HEADER.size:
                self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
                self._view = memoryview(self._map)
            if bytes(self._view[: FILE_HEADER.size]) != file_header(ledger_id, epoch):
                raise DataLogCorruptedError(f"ledger file {path} has a bad header")
        except BaseException:
            self.close()
            raise
        self.offset = FILE_HEADER.size
        self.next_entry_id = 0

    def _entry_at(self, offset: int, entry_id: int) -> tuple[int, int, int] | None:
        """``(group_start, payload_offset, length)`` of a valid entry ``entry_id`` at
        ``offset``, or ``None`` when the bytes there are not one."""
        view = self._view
        if offset + ENTRY_HEADER.size > len(view):
            return None
        length, crc, found_id, group_start = ENTRY_HEADER.unpack_from(view, offset)
        if found_id != entry_id or group_start > found_id:
            return None
        start = offset + ENTRY_HEADER.size
        if start + length > len(view):
            return None
        fields = _ENTRY_CRC_FIELDS.pack(length, found_id, group_start)
        if zlib.crc32(view[start : start + length], zlib.crc32(fields)) != crc:
            return None
        return group_start, start, length

    def read_batch(self, last_entry: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """The next entries up to ``last_entry`` (about ``max_bytes`` of them; at least one).

        Raises :class:`DataLogCorruptedError` when an entry at or before ``last_entry`` is
        missing or damaged.
        """
        batch: list[tuple[int, bytes]] = []
        size = 0
        while self.next_entry_id <= last_entry and (not batch or size < max_bytes):
            found = self._entry_at(self.offset, self.next_entry_id)
            if found is None:
                raise DataLogCorruptedError(
                    f"ledger {self.path.name}: entry {self.next_entry_id} at offset {self.offset} is "
                    f"missing or damaged, but the ledger was closed at entry {last_entry}"
                )
            _, start, length = found
            batch.append((self.next_entry_id, bytes(self._view[start : start + length])))
            size += length
            self.offset = start + length
            self.next_entry_id += 1
        return batch

    def recover_last_entry(self) -> int:
        """Scan an open ledger to its end and return its last whole entry id (-1: none).

        A torn tail - bytes after the last whole entry that do not form an entry, left by
        a crash or by a writer still running - is ignored. If a later valid entry proves
        that the first bad entry had been synced (its ``group_start`` is beyond it), the
        ledger is damaged in the middle: :class:`DataLogCorruptedError`.
        """
        while True:
            found = self._entry_at(self.offset, self.next_entry_id)
            if found is None:
                break
            _, start, length = found
            self.offset = start + length
            self.next_entry_id += 1
        bad = self.next_entry_id
        if self.offset < len(self._view) and self._synced_later(bad):
            raise DataLogCorruptedError(
                f"ledger {self.path.name}: entry {bad} at offset {self.offset} is damaged, "
                "but a later entry shows it had been synced"
            )
        return bad - 1

    def _synced_later(self, bad: int) -> bool:
        """Whether a valid entry after ``bad`` (found by its id bytes) says ``bad`` was synced."""
        for entry_id in range(bad + 1, bad + 1 + _PROOF_SEARCH_IDS):
            group_start = self._find_entry(entry_id)
            if group_start is None:
                if entry_id > bad + 1:
                    return False  # two ids missing in a row: nothing valid follows
                continue
            if group_start > bad:
                return True
        return False

    def _find_entry(self, entry_id: int) -> int | None:
        """``group_start`` of a valid entry ``entry_id`` anywhere after the scan offset."""
        if self._map is None:
            return None
        pattern = entry_id.to_bytes(8, "big")
        position = self._map.find(pattern, self.offset + _ENTRY_ID_OFFSET)
        for _ in range(_PROOF_MAX_CANDIDATES):
            if position == -1:
                return None
            found = self._entry_at(position - _ENTRY_ID_OFFSET, entry_id)
            if found is not None:
                return found[0]
            position = self._map.find(pattern, position + 1)
        return None

    def close(self) -> None:
        self._view.release()
        if self._map is not None:
            self._map.close()
            self._map = None
        with contextlib.suppress(OSError):
            self._file.close()


def recover_ledger(storage: LedgerStorage, directory: Path, ledger_id: int, epoch: int) -> int:
    """The last entry of a ledger file another owner wrote, after making every entry found in it durable.

    The scan may see entries the old owner wrote but never synced (it was fenced, or died, before its fsync). They
    become part of the log once the metadata says "closed at" that entry, so they are synced first.
    """
    path = directory / ledger_file_name(ledger_id, epoch)
    reader = LedgerReader(storage, path, ledger_id, epoch)
    try:
        last = reader.recover_last_entry()
    finally:
        reader.close()
    storage.sync_file(path)
    return last
