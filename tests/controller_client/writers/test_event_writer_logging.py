"""An event writer following a scale is normal operation: nothing about it is logged as a warning."""

from __future__ import annotations

import logging

import pytest
from fake_controller import FakeController

from controller_client.model import ScalingPolicy, StreamConfiguration
from controller_client.stream_manager import StreamManager

pytestmark = pytest.mark.integration

SCOPE = "quiet"


async def test_write_across_a_scale_with_pending_events_logs_no_warning(
    manager: StreamManager, controller: FakeController, caplog: pytest.LogCaptureFixture
) -> None:
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, "scaled", StreamConfiguration(ScalingPolicy.fixed(1)))
    [only] = await manager.current_segments(SCOPE, "scaled")
    caplog.set_level(logging.DEBUG)
    async with await manager.create_writer(SCOPE, "scaled") as writer:
        # Events queued without letting the loop run: unacknowledged when the segment is sealed, so the
        # segment's session meets the seal (SegmentIsSealed) and the writer moves them to the successors.
        for n in range(300):
            await writer.write_event(b"event %d" % n, f"key-{n % 5}")
        await controller.scale(SCOPE, "scaled", [only.segment_id], [(0.0, 0.5), (0.5, 1.0)])
        for n in range(300, 600):
            await writer.write_event(b"event %d" % n, f"key-{n % 5}")
        await writer.flush()
        assert writer.scales_followed == 1
    sessions = [r.getMessage() for r in caplog.records if r.name == "segment_store.client.session"]
    assert any("sealed" in m.lower() for m in sessions), f"no session met the seal: the test proves nothing {sessions}"
    loud = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, loud
