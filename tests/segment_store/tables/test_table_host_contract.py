"""What the tables rely on from a SegmentHost, checked against the ``host`` fixture."""

from __future__ import annotations

import asyncio

import pytest

from segment_store.tables.entry_serializer import read_exact
from segment_store.tables.host import SegmentHost
from segstore_shared.contracts import (
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentTruncatedError,
    SegmentType,
)

pytestmark = pytest.mark.contract

S = "host-contract"
ATTR = 12345


async def test_append_with_expected_offset_and_attributes_is_all_or_nothing(host: SegmentHost) -> None:
    await host.create_segment(S, SegmentType.TABLE, {ATTR: 1})
    assert await host.append(S, b"abc") == 0
    assert await host.append(S, b"de", expected_offset=3) == 3
    with pytest.raises(BadOffsetError):
        await host.append(S, b"x", expected_offset=3)
    stale = AttributeUpdate(ATTR, AttributeUpdateType.REPLACE_IF_EQUALS, 5, comparison_value=2)
    with pytest.raises(BadAttributeUpdateError):
        await host.append(S, b"y", (stale,))
    good = AttributeUpdate(ATTR, AttributeUpdateType.REPLACE_IF_EQUALS, 5, comparison_value=1)
    assert await host.append(S, b"z", (good,), expected_offset=5) == 5
    info = await host.get_info(S)
    assert (info.length, info.attributes[ATTR], info.segment_type) == (6, 5, SegmentType.TABLE)
    assert await read_exact(host, S, 0, 6) == b"abcdez"


async def test_reads_of_any_range_and_truncation(host: SegmentHost) -> None:
    await host.create_segment(S, SegmentType.TABLE)
    data = bytes(range(256)) * 40
    for i in range(0, len(data), 777):
        await host.append(S, data[i : i + 777])
    for start, end in [(0, len(data)), (999, 1001), (4095, 8000), (len(data) - 1, len(data))]:
        assert await read_exact(host, S, start, end - start) == data[start:end]
    await host.truncate(S, 5000)
    assert (await host.get_info(S)).start_offset == 5000
    with pytest.raises(SegmentTruncatedError):
        await host.read(S, 4999, 10)
    assert await read_exact(host, S, 5000, 100) == data[5000:5100]


async def test_tail_read_waits_for_data_or_times_out(host: SegmentHost) -> None:
    await host.create_segment(S, SegmentType.TABLE)
    await host.append(S, b"abc")
    result = await host.read(S, 3, 10, timeout_s=0.05)
    assert result.data == b"" and not result.end_of_segment
    waiting = asyncio.create_task(host.read(S, 3, 10, timeout_s=5))
    await asyncio.sleep(0.01)
    await host.append(S, b"def")
    assert (await waiting).data == b"def"


async def test_create_and_delete_errors(host: SegmentHost) -> None:
    await host.create_segment(S, SegmentType.TABLE)
    with pytest.raises(SegmentExistsError):
        await host.create_segment(S, SegmentType.TABLE)
    await host.delete_segment(S)
    with pytest.raises(SegmentNotExistsError):
        await host.delete_segment(S)
    with pytest.raises(SegmentNotExistsError):
        await host.get_info(S)
