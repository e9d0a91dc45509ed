"""The chunk storage port: Tier-2 as a flat namespace of immutable, uniquely named objects.

SLTS (``ChunkedSegmentStorage`` in Pravega) keeps a segment as an ordered list of chunks and
the list itself in a metadata store; the backend below it only needs object-store semantics.
This port asks for exactly that, so a filesystem, S3 and memory all fit:

* a chunk is written **once, whole and atomically** (:meth:`ChunkStorage.write_chunk`); there
  is no append in place, no overwrite and no rename visible to callers;
* names are unique by construction (segment name + epoch + offset or a counter; seed 004's
  journal relies on it), so writing an existing name is an error, never a silent overwrite;
* reads are range reads of whole, published chunks.

Pravega's ``ChunkStorage`` also offers create/append/concat/truncate capabilities behind
``supportsAppend()``/``supportsConcat()``; segstore uses the no-append mode everywhere (the
mode S3 needs), so those are left out.

Names are '/'-separated keys (see :func:`validate_chunk_name`); the same rules hold in every
backend so a name that works in memory works on disk and in S3.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from segstore_shared.errors import RetriableError, SegstoreError

BufferLike: TypeAlias = bytes | bytearray | memoryview
ChunkData: TypeAlias = BufferLike | Sequence[BufferLike]
"""What :meth:`ChunkStorage.write_chunk` accepts: one buffer or a sequence written back to back."""

MAX_NAME_BYTES = 1024
"""Longest chunk name in UTF-8 bytes (the S3 key limit)."""
MAX_COMPONENT_BYTES = 255
"""Longest '/'-separated name component in UTF-8 bytes (the usual filesystem limit)."""


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """What a backend knows about a published chunk."""

    name: str
    length: int


class ChunkStorageError(SegstoreError):
    """A chunk storage call failed; ``chunk_name`` names the chunk (or the prefix of a listing)."""

    def __init__(self, chunk_name: str, message: str) -> None:
        super().__init__(f"{message}: {chunk_name!r}")
        self.chunk_name = chunk_name


class ChunkNotFoundError(ChunkStorageError):
    """The chunk does not exist (never written, deleted, or not yet published)."""

    def __init__(self, chunk_name: str, message: str = "chunk not found") -> None:
        super().__init__(chunk_name, message)


class ChunkAlreadyExistsError(ChunkStorageError):
    """A chunk with this name exists; the existing content was left as it was."""

    def __init__(self, chunk_name: str, message: str = "chunk already exists") -> None:
        super().__init__(chunk_name, message)


class InvalidChunkNameError(ChunkStorageError, ValueError):
    """The name breaks :func:`validate_chunk_name`, or clashes with another name's directory."""


class ChunkRangeError(ChunkStorageError, ValueError):
    """A read asked for bytes outside ``[0, length)`` of the chunk, or a negative offset/length."""


class ChunkStorageUnavailableError(ChunkStorageError, RetriableError):
    """The backend is out (I/O error, timeout, throttling); the same call may succeed later.

    The storage writer retries these with backoff and throttles intake meanwhile.
    """


class ChunkStorageFullError(ChunkStorageUnavailableError):
    """The backend has no space left; retriable because truncation and deletion free space."""


def validate_chunk_name(name: str) -> None:
    """Check that ``name`` is a portable chunk name.

    A name is 1..1024 UTF-8 bytes of '/'-separated components; each component is 1..255 bytes,
    is not ``.`` or ``..``, does not start with ``.`` (hidden names are reserved for a
    backend's temporary files) and holds no control character or backslash. No leading or
    trailing '/'.

    Raises:
        InvalidChunkNameError: if the name breaks a rule.
    """
    if not isinstance(name, str) or not name:
        raise InvalidChunkNameError(str(name), "chunk name must be a non-empty string")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidChunkNameError(name, "chunk name is not valid UTF-8") from exc
    if len(encoded) > MAX_NAME_BYTES:
        raise InvalidChunkNameError(name, f"chunk name longer than {MAX_NAME_BYTES} bytes")
    if any(ord(c) < 0x20 or c in "\x7f\\" for c in name):
        raise InvalidChunkNameError(name, "chunk name holds a control character or backslash")
    for component in name.split("/"):
        if not component:
            raise InvalidChunkNameError(name, "chunk name has an empty component (leading, trailing or '//')")
        if component.startswith("."):
            raise InvalidChunkNameError(name, "chunk name component starts with '.' (or is '.'/'..')")
        if len(component.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise InvalidChunkNameError(name, f"chunk name component longer than {MAX_COMPONENT_BYTES} bytes")


def as_buffers(data: ChunkData) -> list[memoryview]:
    """Normalize ``data`` to a list of flat byte memoryviews (no copy unless non-contiguous).

    Anything with the buffer protocol (bytes, memoryview, ``pyarrow.Buffer``, numpy arrays) is
    one buffer; anything else is taken as a sequence of buffers.

    Raises:
        TypeError: if ``data`` or an element of it is not a buffer.
    """
    try:
        items: Sequence[BufferLike] = [memoryview(data)]  # type: ignore[arg-type]
    except TypeError:
        items = data  # type: ignore[assignment]
    views: list[memoryview] = []
    for item in items:
        view = memoryview(item)
        if view.ndim != 1 or view.itemsize != 1 or view.format not in ("B", "b", "c"):
            view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        elif not view.c_contiguous:
            view = memoryview(view.tobytes())
        views.append(view)
    return views


def check_read_range(name: str, offset: int, length: int, chunk_length: int) -> None:
    """Raise :class:`ChunkRangeError` unless ``[offset, offset + length)`` lies inside the chunk."""
    if offset < 0 or length < 0:
        raise ChunkRangeError(name, f"negative offset {offset} or length {length}")
    if offset + length > chunk_length:
        raise ChunkRangeError(name, f"range [{offset}, {offset + length}) is beyond the chunk length {chunk_length}")


@runtime_checkable
class ChunkStorage(Protocol):
    """Tier-2 chunk storage with object-store semantics (filesystem, S3, memory).

    Methods are **synchronous**: the storage writer and the read path call them from worker
    threads, never on the event loop. Implementations **must be thread-safe**: any method may
    run concurrently with any other, on the same or different names.

    Guarantees every implementation gives:

    * **Atomic publish.** :meth:`write_chunk` makes the whole chunk visible at once; no reader
      (in this process or outside, e.g. a Spark executor opening :meth:`location`) ever sees a
      partly written chunk. A failed write leaves no chunk behind under ``name``.
    * **No overwrite.** Writing an existing name raises :class:`ChunkAlreadyExistsError` and
      keeps the old content. Chunks are immutable until deleted.
    * **Read-your-writes.** Once a call returns, :meth:`exists`, :meth:`info`, :meth:`read` and
      :meth:`list` in any thread reflect it (strong consistency, as S3 gives since 2020).
    * **Durability.** A returned :meth:`write_chunk` survives a process or machine crash
      (filesystem: file and directory fsync'd).

    Every method may raise :class:`ChunkStorageUnavailableError` (retriable) on an outage and
    :class:`InvalidChunkNameError` for a name that fails :func:`validate_chunk_name`.
    """

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        """Create chunk ``name`` holding ``data`` (buffers concatenated in order), atomically.

        Raises:
            ChunkAlreadyExistsError: ``name`` exists; nothing was changed.
            InvalidChunkNameError: bad name, or (filesystem, memory, S3-compatible stores with
                directories such as SeaweedFS) ``name`` is a directory prefix of an existing chunk
                or has an existing chunk as a directory prefix.
            ChunkStorageUnavailableError: outage; no chunk is visible under ``name`` unless
                the write completed before the failure was reported (check with :meth:`exists`).
        """
        ...

    def read(self, name: str, offset: int, length: int) -> bytes:
        """Return exactly ``length`` bytes of chunk ``name`` starting at ``offset``.

        A range past the end is an error, never a short read: chunk lengths are known from
        metadata, and a mismatch means corrupt metadata that must not be papered over.

        Raises:
            ChunkNotFoundError: no such chunk.
            ChunkRangeError: negative offset/length or ``offset + length`` > chunk length.
        """
        ...

    def read_all(self, name: str) -> bytes:
        """Return the whole content of chunk ``name``.

        Raises:
            ChunkNotFoundError: no such chunk.
        """
        ...

    def info(self, name: str) -> ChunkInfo:
        """Return name and length of chunk ``name``.

        Raises:
            ChunkNotFoundError: no such chunk.
        """
        ...

    def exists(self, name: str) -> bool:
        """Tell whether chunk ``name`` is published (a directory of that name is not a chunk)."""
        ...

    def delete(self, name: str) -> None:
        """Delete chunk ``name``; not idempotent.

        Raises:
            ChunkNotFoundError: no such chunk.
        """
        ...

    def delete_if_exists(self, name: str) -> bool:
        """Delete chunk ``name`` if present; return whether it was there (idempotent delete)."""
        ...

    def list(self, prefix: str = "") -> Iterator[str]:
        """Yield the names of published chunks starting with ``prefix``, in sorted order.

        Order is by Unicode code point, which equals UTF-8 byte order (S3's listing order).
        ``prefix`` is a plain string prefix, not a directory: ``"seg/c-1"`` matches
        ``"seg/c-10"``. The listing is not a snapshot: chunks written or deleted while
        iterating may or may not appear. Temporary files of unfinished writes never appear.
        """
        ...

    def location(self, name: str) -> str | None:
        """Return a URI an outside reader (pyarrow in a Spark executor) can open directly.

        ``file:///abs/path`` for the filesystem, ``s3://bucket/key`` for S3, ``None`` when the
        chunk is not reachable from outside (memory). Does not check that the chunk exists.
        """
        ...

    def close(self) -> None:
        """Release clients and handles; later calls are undefined. Idempotent."""
        ...
