"""Run ``segstore standalone`` as a user would: a child process on free loopback ports.

``StandaloneProcess`` starts it, waits for its ready line, and stops it with SIGTERM (then SIGKILL
after a grace period), so a test sees exactly what a user's client sees.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from segstore_shared.coordination.zookeeper_server import free_port

READY = "segstore standalone ready"


class StandaloneProcess:
    def __init__(
        self,
        data_dir: Path,
        container_count: int = 4,
        ready_timeout_s: float = 120.0,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args
        self.env = env
        self.container_count = container_count
        self.ready_timeout_s = ready_timeout_s
        self.controller_port = free_port()
        self.segmentstore_port = free_port()
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def controller_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.controller_port}"

    @property
    def segmentstore_endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", self.segmentstore_port

    def start(self) -> StandaloneProcess:
        command = [
            sys.executable,
            "-m",
            "segstore_cli",
            "standalone",
            "--data-dir",
            str(self.data_dir),
            "--controller-port",
            str(self.controller_port),
            "--segmentstore-port",
            str(self.segmentstore_port),
            "--container-count",
            str(self.container_count),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, **(self.env or {})},
        )
        ready = threading.Event()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line.rstrip())
                if READY in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout_s
        while not ready.wait(0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("segstore standalone did not start:\n" + "\n".join(self.output[-60:]))
        return self

    def stop(self, timeout_s: float = 60.0) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        return stop_process(process, timeout_s)

    def __enter__(self) -> StandaloneProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def stop_process(process: subprocess.Popen[str], timeout_s: float, whole_group: bool = False) -> int:
    """SIGTERM (to its process group if ``whole_group``), then after ``timeout_s`` SIGKILL to its process group
    (the process leads one: started with ``start_new_session``); its exit status."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if whole_group:
                os.killpg(process.pid, signal.SIGTERM)
            else:
                process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode
