"""The connector's user scenarios on a Spark standalone cluster (a master and two workers, separate JVMs with
clean environments): the executors get the connector from ``spark.submit.pyFiles`` and their Python from
``spark.pyspark.python`` only, never from the driver's environment or files.

Each check reads the stream back with the client library, not with Spark. With TLS and authentication, the trust
store reaches the executors as a file Spark ships (``addFile``, as ``spark.files`` does) and named by its bare name,
and the password never does: the executors work with the driver's delegation token.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auth_fixtures import write_password_file
from prometheus_client.parser import text_string_to_metric_families
from s3_fixtures import CREDENTIALS
from seaweedfs_fixtures import SeaweedServer, seaweed_server_fixture  # noqa: F401 (a fixture)
from spark_cluster import REPO, SparkCluster, executor_python, package_zip
from spark_fixtures import Streams
from standalone_process import StandaloneProcess
from tls_fixtures import TlsFiles, make_tls_files

from segment_store.client import BlockingClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "cluster"
DEADLINE_S = 180.0
_AWS = {
    "AWS_ACCESS_KEY_ID": CREDENTIALS["access_key_id"],
    "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret_access_key"],
    "AWS_DEFAULT_REGION": CREDENTIALS["region"],
}
CLUSTER_SPARK_CONF = {f"spark.executorEnv.{name}": value for name, value in _AWS.items()}
"""The executors' S3 credentials, given through Spark (the workers' environments are clean)."""


def _where_executors_run(spark: Any) -> set[tuple[str, str, str]]:
    """(Python, origin of ``pravega_spark``, working directory) of the tasks of a job with one task per core."""

    def where(_: Any) -> list[tuple[str, str, str]]:
        import sys

        import pravega_spark

        return [(sys.executable, pravega_spark.__file__ or "", os.getcwd())]

    return set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect())


def test_executors_run_the_shipped_connector_with_the_configured_python(
    cluster_spark: Any, cluster: SparkCluster
) -> None:
    found = _where_executors_run(cluster_spark)
    assert {python for python, _, _ in found} == {executor_python()}
    assert all(origin.endswith("segstore.zip/pravega_spark/__init__.pyc") for _, origin, _ in found), found
    workers = {str(d) for d in cluster.worker_dirs}
    assert {next(w for w in workers if cwd.startswith(w)) for _, _, cwd in found} == workers  # both workers ran tasks


def test_batch_write_then_batch_read_on_the_cluster(cluster_spark: Any, cluster_streams: Streams) -> None:
    options = cluster_streams.options(SCOPE, "batch")
    rows = cluster_spark.range(0, 5_000, numPartitions=4).selectExpr(
        "concat('event-', id) as event", "concat('key-', id % 5) as routing_key"
    )
    rows.write.format("segstore").options(**options, defaultNumSegments="3").mode("append").save()

    written = cluster_streams.events(SCOPE, "batch")
    assert sorted(data for _, _, data in written) == sorted(f"event-{i}".encode() for i in range(5_000))
    read = cluster_spark.read.format("segstore").options(**options).load()
    rows_read = sorted((r.segment_id, r.offset, bytes(r.event)) for r in read.collect())
    assert rows_read == sorted(written)


class _Writer(threading.Thread):
    """Writes ``count`` numbered events in small batches, as a producer next to a running query."""

    def __init__(self, streams: Streams, stream: str, count: int) -> None:
        super().__init__(daemon=True)
        self.streams, self.stream, self.count = streams, stream, count
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.streams.manager.create_writer(SCOPE, self.stream) as writer:
                for start in range(0, self.count, 100):
                    events: list[tuple[bytes, str | None]] = [
                        (f"live-{n:05d}".encode(), f"key-{n % 4}") for n in range(start, start + 100)
                    ]
                    writer.write_events(events).result(60)
        except BaseException as error:
            self.error = error


SPARK_WORKER_START_FAILURE = "Python worker failed to connect back"
"""Spark's own failure when a Python worker it starts takes over its fixed 10 s to connect back (seen on a 2-core
machine at load 15-20, at the query's start): the query is started again from its checkpoint, as an operator
would, up to ``RESTARTS`` times; anything else fails the test."""
RESTARTS = 2


def test_live_streaming_read_while_a_writer_writes(
    cluster_spark: Any, cluster_streams: Streams, tmp_path: Path
) -> None:
    cluster_streams.create(SCOPE, "live", segments=2)
    batches: dict[int, list[bytes]] = {}  # by batch id: a batch run again after a restart replaces itself

    def each_batch(frame: Any, batch_id: int) -> None:
        batches[batch_id] = [bytes(r.event) for r in frame.select("event").collect()]

    def start() -> Any:
        return (
            cluster_spark.readStream.format("segstore")
            .options(**cluster_streams.options(SCOPE, "live"), startingOffsets="earliest")
            .load()
            .writeStream.foreachBatch(each_batch)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def seen() -> list[bytes]:
        return [event for batch_id in sorted(batches) for event in batches[batch_id]]

    query, restarts = start(), 0
    writer = _Writer(cluster_streams, "live", 3_000)
    try:
        writer.start()
        deadline = time.monotonic() + DEADLINE_S
        while writer.is_alive() or len(seen()) < 3_000:
            failure = query.exception()
            if failure is not None:
                assert SPARK_WORKER_START_FAILURE in str(failure) and restarts < RESTARTS, failure
                query.stop()
                query, restarts = start(), restarts + 1
            assert time.monotonic() < deadline, f"{len(seen())} of 3000 events arrived"
            time.sleep(0.2)
        assert writer.error is None
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(seen()) == [f"live-{n:05d}".encode() for n in range(3_000)]  # each exactly once


def test_exactly_once_streaming_write_across_a_restart(
    cluster_spark: Any, cluster_streams: Streams, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    cluster_streams.create(SCOPE, "sink", segments=2)

    def add_file(n: int) -> None:
        (source / f"part-{n}.txt").write_text("".join(f"line-{n}-{i}\n" for i in range(200)))

    def run() -> str:
        query = (
            cluster_spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .withColumnRenamed("value", "event")
            .writeStream.format("segstore")
            .options(**cluster_streams.options(SCOPE, "sink"))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return str(query.id)

    for n in range(3):
        add_file(n)
    first = run()
    add_file(3)
    assert run() == first  # restarted from the checkpoint: the same query goes on
    written = sorted(data for _, _, data in cluster_streams.events(SCOPE, "sink"))
    assert written == sorted(f"line-{n}-{i}".encode() for n in range(4) for i in range(200))


USERS = {
    "writer": ("writer-pw", "prn::*,READ_UPDATE"),
    "reader": ("reader-pw", "prn::/,READ;prn::/scope:secure/*,READ"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneProcess, TlsFiles]]:
    """A standalone with TLS (a certificate for ``localhost``) and password authentication."""
    base = tmp_path_factory.mktemp("cluster-secured")
    files = make_tls_files(base / "tls")
    write_password_file(base / "passwd", USERS)
    flags = ("--tls-cert", str(files.cert), "--tls-key", str(files.key), "--auth-password-file", str(base / "passwd"))
    with StandaloneProcess(base / "data", extra_args=flags) as process:
        yield process, files


def test_tls_and_authentication_with_the_trust_store_shipped_by_spark(
    cluster_spark: Any, secured: tuple[StandaloneProcess, TlsFiles], tmp_path: Path
) -> None:
    process, files = secured
    shipped = tmp_path / "segstore-ca.pem"  # a name no host has a file under but the one Spark ships
    shutil.copy(files.ca, shipped)
    cluster_spark.sparkContext.addFile(str(shipped))  # as spark.files / spark-submit --files would
    assert not Path("segstore-ca.pem").exists()

    def options(user: str) -> dict[str, str]:
        return {
            "controller": f"tls://localhost:{process.controller_port}",
            "trustStore": "segstore-ca.pem",
            "scope": "secure",
            "stream": "events",
            "username": user,
            "password": USERS[user][0],
        }

    rows = cluster_spark.range(0, 2_000, numPartitions=4).selectExpr(
        "cast(id as string) as event", "cast(id % 5 as string) as routing_key"
    )
    rows.write.format("segstore").options(**options("writer"), defaultNumSegments="2").mode("append").save()
    read = cluster_spark.read.format("segstore").options(**options("reader")).load()
    assert sorted(int(row.event.decode()) for row in read.select("event").collect()) == list(range(2_000))


def test_the_docs_cluster_example_runs_on_the_cluster(
    cluster_spark: Any,
    cluster: SparkCluster,
    cluster_streams: Streams,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/spark.md, "Running on a Spark cluster": its ```python cluster block, with the names it leaves to the
    reader set to this cluster's (its ``getOrCreate()`` returns the module's session: one driver per process)."""
    text = (REPO / "docs" / "spark.md").read_text()
    (example,) = re.findall(r"^```python cluster\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    names = {
        "master_url": cluster.master_url,
        "executor_python": executor_python(),
        "segstore_zip": str(package_zip(tmp_path / "segstore.zip")),
        "controller": cluster_streams.controller_uri,
    }
    exec(compile(example, "docs/spark.md (cluster example)", "exec"), names)
    assert capsys.readouterr().out.splitlines()[-1] == "1000"


def _served_bytes(metrics_port: int) -> float:
    """Bytes the segment store has answered reads with so far (its ``segstore_read_bytes_total``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "segstore_read_bytes_total"
    )


def test_tier2_history_read_from_s3_by_executors_with_credentials_given_by_spark(
    cluster_spark: Any, seaweed_server: SeaweedServer, tmp_path: Path
) -> None:
    """A standalone with S3 Tier-2 (SeaweedFS, which checks signatures); the executors' only credentials are the
    ``spark.executorEnv.AWS_*`` of ``CLUSTER_SPARK_CONF`` (the workers' environments have none): history flushed
    to S3 is read straight from the chunks, not through the segment store."""
    flags = (
        *("--tier2", "s3", "--s3-endpoint", seaweed_server.endpoint, "--s3-bucket", "cluster", "--s3-create-bucket"),
        *("--metrics-port", "0"),
    )
    with StandaloneProcess(tmp_path / "s3-standalone", extra_args=flags, env=_AWS) as process:
        streams = Streams(process)
        try:
            streams.create(SCOPE, "history", segments=2)
            streams.write(
                SCOPE, "history", [(f"old-{i:05d}".encode() + b"." * (i % 300), f"k{i % 8}") for i in range(6000)]
            )
            with BlockingClient(process.segmentstore_endpoint) as client:
                for container in range(process.container_count):
                    client.flush_to_storage(container)
            history = sum(streams.tail(SCOPE, "history").positions.values())
            streams.write(SCOPE, "history", [(f"new-{i:03d}".encode(), None) for i in range(300)])  # Tier-1 only
            tail = sum(streams.tail(SCOPE, "history").positions.values()) - history
            expected = sorted(streams.events(SCOPE, "history"))

            before = _served_bytes(process.metrics_ports[1])
            read = cluster_spark.read.format("segstore").options(**streams.options(SCOPE, "history")).load()
            rows = sorted((r.segment_id, r.offset, bytes(r.event)) for r in read.collect())
            served = _served_bytes(process.metrics_ports[1]) - before
        finally:
            streams.close()
    assert rows == expected and len(rows) == 6300
    assert history > 500_000 and served <= tail  # the history came from S3, not through the segment store
