"""What a table segment needs from its segment container (the subset of the container API it uses).

:class:`~segment_store.containers.segment_container.SegmentContainer` implements this; unit
tests of the table layer may use any object that keeps the same contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from segment_store.reading.read_index import ReadResult
from segstore_shared.contracts import AttributeUpdate, SegmentInfo, SegmentType


class SegmentHost(Protocol):
    async def create_segment(
        self, name: str, segment_type: SegmentType, attributes: dict[int, int] | None = None
    ) -> None:
        """Raises SegmentExistsError."""

    async def delete_segment(self, name: str) -> None:
        """Raises SegmentNotExistsError."""

    async def append(
        self,
        name: str,
        data: bytes,
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> int:
        """Append durably; returns the offset the data was written at.

        Raises SegmentNotExistsError, SegmentSealedError, BadOffsetError (``expected_offset`` is
        not the length), BadAttributeUpdateError.
        """

    async def read(self, name: str, offset: int, max_length: int, timeout_s: float = 0.0) -> ReadResult:
        """Up to ``max_length`` bytes at ``offset`` (see ReadIndex.read). Raises SegmentTruncatedError."""

    async def get_info(self, name: str) -> SegmentInfo:
        """Raises SegmentNotExistsError."""

    async def truncate(self, name: str, offset: int) -> None: ...
