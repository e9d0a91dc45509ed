"""Run a Spark Connect server as a user would: ``spark-submit`` of ``SparkConnectServer`` from the installed pyspark.

``SparkConnectServerProcess`` starts it in its own process group on 127.0.0.1 (the gRPC port chosen by the OS:
``spark.connect.grpc.binding.port=0``, read back from the server's "started at" log line), with this interpreter
as the Python of its workers, so the server finds ``format("segstore")`` the way any session does (pyspark's
discovery of the top-level ``pyspark_segstore`` module). ``stop`` sends SIGTERM to the group (the JVM and its
Python workers), then SIGKILL after a grace period.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyspark
from standalone_process import stop_process

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:(?P<port>\d+)")


class SparkConnectServerProcess:
    def __init__(self, work_dir: Path, master: str = "local[2]", ready_timeout_s: float = 120.0) -> None:
        self.work_dir = work_dir
        self.master = master
        self.ready_timeout_s = ready_timeout_s
        self.port: int | None = None
        self.process: subprocess.Popen[str] | None = None
        self.output: collections.deque[str] = collections.deque(maxlen=200)

    @property
    def url(self) -> str:
        assert self.port is not None, "the server is not started"
        return f"sc://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.catalogImplementation": "in-memory",
            "spark.sql.warehouse.dir": str(self.work_dir / "warehouse"),
        }
        args = [str(spark_submit), "--class", SERVER_CLASS, "--master", self.master, "--name", "segstore-connect-test"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        return [*args, "spark-internal"]

    def start(self) -> SparkConnectServerProcess:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE"):
            env.pop(name, None)
        self.process = subprocess.Popen(
            self.command(),
            cwd=self.work_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=env,
        )
        started = threading.Event()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line.rstrip())
                found = STARTED.search(line)
                if found and not started.is_set():
                    self.port = int(found["port"])
                    started.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout_s
        while not started.wait(0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("Spark Connect server did not start:\n" + "\n".join(self.output))
        return self

    def stop(self, timeout_s: float = 60.0) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        return stop_process(process, timeout_s, whole_group=True)

    def __enter__(self) -> SparkConnectServerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
