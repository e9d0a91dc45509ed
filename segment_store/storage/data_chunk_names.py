"""Names of a container's data chunks in the chunk storage (the system journal's are in
:mod:`segment_store.storage.journal.records`).

Every data chunk (one :meth:`~segment_store.storage.chunked_storage.ChunkedSegmentStorage.write`, or one
compaction's merge) is written once under a unique, predictable name

    data/c{container}/{escaped segment name}/e{epoch}-{seq}.parquet

``epoch`` is the writing instance's epoch, ``seq`` its counter shared with the journal records and
snapshots, so no two chunks ever share a name. Boot parses these names to sweep the chunks no metadata
references (only those of an epoch up to its own).
"""

from __future__ import annotations

import hashlib
import re
import string

_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
_MAX_ESCAPED = 200
_DATA_CHUNK = re.compile(r"e(\d+)-(\d+)\.parquet")


def data_prefix(container_id: int) -> str:
    """``data/c{container}/``: where the container's data chunks live."""
    return f"data/c{container_id}/"


def escape_segment_name(segment: str) -> str:
    """``segment`` as one valid chunk name component (percent-escaped; hashed if very long).

    Letters, digits, ``-``, ``_`` and ``.`` (not leading) stay; every other character, '/'
    included, becomes ``%XX`` per UTF-8 byte. Results over 200 bytes keep a prefix and end in
    ``~`` + 32 hex digits of SHA-256 of the name (an escaped name never holds a bare ``~``).
    """
    out: list[str] = []
    for i, ch in enumerate(segment):
        if ch in _SAFE and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    escaped = "".join(out)
    if len(escaped) > _MAX_ESCAPED:
        digest = hashlib.sha256(segment.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        escaped = f"{escaped[:150]}~{digest}"
    return escaped


def data_chunk_name(container_id: int, segment: str, epoch: int, seq: int) -> str:
    return f"{data_prefix(container_id)}{escape_segment_name(segment)}/e{epoch}-{seq}.parquet"


def parse_data_chunk_name(name: str) -> tuple[int, int] | None:
    """``(epoch, seq)`` of a data chunk name, or ``None`` if it is not one."""
    match = _DATA_CHUNK.fullmatch(name.rpartition("/")[2])
    return (int(match.group(1)), int(match.group(2))) if match else None
