"""Table compaction: copy the live entries of the head to the tail, keeping their versions, then truncate.

After Pravega's ``TableCompactor``. One pass reads the whole entries of at most ``max_compaction_bytes``
from the head (the compaction offset), keeps those the index still points at (the latest update of a
live key; overwritten updates and removals are dropped), appends them again with their versions written
explicitly, and in the same append moves the ``COMPACTION_OFFSET`` attribute past the region. Then the
segment is truncated there. The append is conditional on the tail the index knows, so an entry that lands
in between (an append whose outcome was unknown) cancels the pass instead of being overtaken by a copy.

Reading ``[start offset, tail)`` of a compacted segment rebuilds the same index: the copies come after
the originals, and an update that followed a copied key keeps a higher version.
"""

from __future__ import annotations

import logging
from contextlib import aclosing

from segment_store.tables.attributes import COMPACTION_OFFSET
from segment_store.tables.config import TableConfig
from segment_store.tables.entry_serializer import ParsedEntry, scan, serialize
from segment_store.tables.host import SegmentHost
from segment_store.tables.key_index import KeyIndex
from segstore_shared.contracts import (
    NULL_ATTRIBUTE_VALUE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    SegmentInfo,
    SegstoreError,
)

logger = logging.getLogger(__name__)


class TableCompactor:
    """Compacts table segments of one host; the caller holds the table's lock around :meth:`compact`."""

    def __init__(self, host: SegmentHost, config: TableConfig) -> None:
        self._host = host
        self.config = config

    def is_due(self, index: KeyIndex) -> bool:
        """Enough bytes behind the head, and too few of them live."""
        if index.tail - index.head <= self.config.compaction_trigger_bytes:
            return False
        return index.utilization_percent() < self.config.min_utilization_percent

    async def compact(self, name: str, index: KeyIndex, info: SegmentInfo) -> bool:
        """One pass over the head of ``name``; ``index`` must be up to date (``tail == info.length``).

        Returns whether the head moved. Updates ``index`` (copied keys move, ``head`` advances); leaves it
        untouched if the append is refused (BadOffsetError, BadAttributeUpdateError). Other errors propagate.
        """
        if index.tail != info.length:
            raise ValueError(f"{name}: index tail {index.tail} is not the segment length {info.length}")
        await self._truncate_to_head(name, index, info)
        if index.head >= index.tail:
            return False
        window_end = min(index.tail, index.head + self.config.max_compaction_bytes)
        copies: list[tuple[ParsedEntry, int]] = []  # entry, its version
        new_head = index.head
        async with aclosing(scan(self._host, name, index.head, index.tail, self.config.read_chunk_bytes)) as entries:
            async for entry in entries:
                slot = index.get(entry.key)
                if not entry.removed and slot is not None and slot.offset == entry.offset:
                    copies.append((entry, slot.version))
                new_head = entry.offset + entry.length
                if new_head >= window_end:
                    break
        if copies:
            data, positions = serialize([(e.key, e.value, version) for e, version in copies])
            update = AttributeUpdate(
                COMPACTION_OFFSET,
                AttributeUpdateType.REPLACE_IF_EQUALS,
                new_head,
                comparison_value=info.attributes.get(COMPACTION_OFFSET, NULL_ATTRIBUTE_VALUE),
            )
            try:
                offset = await self._host.append(name, data, (update,), expected_offset=index.tail)
            except (BadOffsetError, BadAttributeUpdateError) as e:
                logger.info("%s: compaction skipped, the segment changed under it: %s", name, e)
                return False
            for (entry, version), position in zip(copies, positions, strict=True):
                index.apply(
                    ParsedEntry(offset + position, entry.length, entry.key, None, False, explicit_version=version)
                )
        index.head = new_head
        await self._truncate_to_head(name, index, info)
        return True

    async def _truncate_to_head(self, name: str, index: KeyIndex, info: SegmentInfo) -> None:
        """Truncate below the head; a failure is logged and retried on the next pass."""
        if info.start_offset >= index.head:
            return
        try:
            await self._host.truncate(name, index.head)
        except SegstoreError:
            logger.warning(
                "%s: truncation at %d failed; retried on the next compaction", name, index.head, exc_info=True
            )
