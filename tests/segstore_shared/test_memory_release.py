"""Returning freed memory to the OS: each step the process can take is taken and its RSS reported."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

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


def _pool_in_fresh_process(env: dict[str, str], code: str) -> str:
    script = f"from segstore_shared.memory_release import arrow_on_system_allocator\n{code}\n"
    script += "import pyarrow\nprint(pyarrow.default_memory_pool().backend_name)"
    env = {**os.environ, **env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env = {k: v for k, v in env.items() if v != ""}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_server_process_allocates_arrow_memory_with_malloc_so_that_malloc_trim_returns_it() -> None:
    # before pyarrow loads (the entry point's case) and after (it was imported first)
    assert _pool_in_fresh_process({"ARROW_DEFAULT_MEMORY_POOL": ""}, "arrow_on_system_allocator()") == "system"
    late = "import pyarrow\nassert arrow_on_system_allocator() == 'system'"
    assert _pool_in_fresh_process({"ARROW_DEFAULT_MEMORY_POOL": ""}, late) == "system"


def test_a_pool_the_user_chose_is_kept() -> None:
    chosen = {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}
    assert _pool_in_fresh_process(chosen, "assert arrow_on_system_allocator() == 'mimalloc'") == "mimalloc"
