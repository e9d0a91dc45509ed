"""Which container owns a segment (Pravega's ``SegmentToContainerMapper``).

A segment maps by a stable hash of its *primary* name, so a transaction or transient
segment (``<parent>#transaction.<32 hex>``, ``<parent>#transient.<32 hex>``) lands in its
parent's container (a merge never crosses containers), and every epoch of one stream
segment (``<scope>/<stream>/<n>.#epoch.<e>``) lands together. The hash is fixed forever:
changing it would move data between containers.
"""

from __future__ import annotations

import hashlib

TRANSACTION_DELIMITER = "#transaction."
TRANSIENT_DELIMITER = "#transient."
EPOCH_DELIMITER = ".#epoch."
_ID_LENGTH = 32  # two 16-hex-digit parts


def _strip_suffix(name: str, delimiter: str) -> str | None:
    position = name.rfind(delimiter)
    if position < 0 or position + len(delimiter) + _ID_LENGTH > len(name):
        return None
    return name[:position]


def parent_segment_name(name: str) -> str | None:
    """The parent of a transaction or transient segment, else None."""
    parent = _strip_suffix(name, TRANSACTION_DELIMITER)
    return parent if parent is not None else _strip_suffix(name, TRANSIENT_DELIMITER)


def primary_segment_name(name: str) -> str:
    """``name`` without a transaction/transient suffix and without its ``.#epoch.`` suffix."""
    parent = parent_segment_name(name)
    if parent is not None:
        name = parent
    position = name.rfind(EPOCH_DELIMITER)
    return name if position < 0 else name[:position]


def container_of(name: str, container_count: int) -> int:
    """The id (``0 <= id < container_count``) of the container owning segment ``name``."""
    if container_count <= 0:
        raise ValueError(f"container_count must be positive, not {container_count}")
    digest = hashlib.blake2b(primary_segment_name(name).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % container_count
