"""Returning freed memory to the OS: each step the process can take is taken and its RSS reported."""

from __future__ import annotations

import platform
import sys

import pyarrow as pa
import pytest

from segstore_shared.memory_release import release_memory, rss_mb

pytestmark = pytest.mark.unit


def test_release_memory_with_freed_blocks_takes_every_step_and_rss_does_not_grow() -> None:
    blocks = [bytes(1 << 20) for _ in range(64)]  # 64 MiB, half of it freed below
    arrow = pa.allocate_buffer(32 << 20)
    del blocks[::2], arrow
    steps = release_memory()
    assert steps["before"] > 0 and steps["before"] == pytest.approx(rss_mb(), rel=0.5)
    assert "arrow_pool" in steps  # pyarrow is loaded here
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert steps["malloc_trim"] <= steps["before"]  # glibc has malloc_trim: it was called
