"""Spark against a standalone with authentication on: ``username``/``password`` on the driver, executors working
with the delegation token the driver got (the password never reaches them: the pickled reader partitions and sink
writer carry a token), a wrong password and a user without write permission refused naming the option.

The controller signs tokens for ``TOKEN_TTL_S`` only, so these queries outlive the executors' tokens: the
executors renew them at the controller (``controller_client.controller.bearer``) as a long job's do.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_fixtures import write_password_file
from standalone_process import StandaloneProcess

from pravega_spark.options.read import ReadOptions
from pravega_spark.read.source import SegstoreBatchReader
from pravega_spark.write.sink import SegstoreBatchWriter
from segstore_shared.auth.tokens import token_expiry

pytestmark = [pytest.mark.spark, pytest.mark.slow]
TOKEN_TTL_S = 6
USERS = {
    "writer": ("writer-pw", "prn::*,READ_UPDATE"),
    "reader": ("reader-pw", "prn::/,READ;prn::/scope:sparksec/*,READ"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("spark-secured")
    write_password_file(base / "passwd", USERS)
    flags = ("--auth-password-file", str(base / "passwd"), "--auth-token-ttl-s", str(TOKEN_TTL_S))
    with StandaloneProcess(base / "data", extra_args=flags) as process:
        yield process


def options(process: StandaloneProcess, user: str, password: str | None = None) -> dict[str, str]:
    return {
        "controller": process.controller_uri,
        "scope": "sparksec",
        "stream": "events",
        "username": user,
        "password": password or USERS[user][0],
    }


def test_write_and_read_with_a_password_that_never_reaches_the_executors(spark, secured: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    rows = spark.range(0, 2_000, numPartitions=2).selectExpr(
        "cast(id as string) as event", "cast(id % 5 as string) as routing_key"
    )
    rows.write.format("segstore").options(**options(secured, "writer"), defaultNumSegments="2").mode("append").save()
    read = spark.read.format("segstore").options(**options(secured, "reader")).load()
    assert sorted(int(row.event.decode()) for row in read.select("event").collect()) == list(range(2_000))

    writer = SegstoreBatchWriter(options(secured, "writer"), rows.schema, False)
    shipped = pickle.dumps(writer)
    assert b"writer-pw" not in shipped and writer.options.target.token
    assert writer.driver_options.target.password == "writer-pw"
    reader = SegstoreBatchReader(ReadOptions.parse(options(secured, "reader")), read.schema)
    partitions = reader.partitions()
    assert partitions and all(b"reader-pw" not in pickle.dumps(p) for p in partitions)


def test_a_wrong_password_and_a_reader_writing_are_refused_naming_the_option(spark, secured: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match=r"option 'password': the controller at .* refused it"):
        spark.read.format("segstore").options(**options(secured, "reader", "guess")).load().collect()
    rows = spark.range(0, 10).selectExpr("cast(id as string) as event")
    with pytest.raises(Exception, match=r"option 'username': may not write to this stream"):
        rows.write.format("segstore").options(**options(secured, "reader")).mode("append").save()


def _wait_until_expired(token: str) -> None:
    """Let the wall clock pass the token's ``exp`` (what the test is about: time, not an event)."""
    exp = token_expiry(token)
    assert exp is not None
    time.sleep(max(0.0, exp + 1.0 - time.time()))


def test_an_executor_renews_the_expired_token_it_was_shipped_with(spark, secured: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    rows = spark.createDataFrame([("e0", "k")], "event string, routing_key string")
    writer = SegstoreBatchWriter({**options(secured, "writer"), "stream": "renewed"}, rows.schema, False)
    shipped: SegstoreBatchWriter = pickle.loads(pickle.dumps(writer))
    token = shipped.options.target.token
    assert token is not None
    _wait_until_expired(token)
    events = [f"e{i}" for i in range(50)]
    message = shipped.write(
        iter(rows.sparkSession.createDataFrame([(e, "k") for e in events], rows.schema).toArrow().to_batches())
    )
    shipped.commit([message])  # with the token too: the pickled writer has no password
    read = spark.read.format("segstore").options(**{**options(secured, "reader"), "stream": "renewed"}).load()
    assert sorted(row.event.decode() for row in read.select("event").collect()) == sorted(events)


def test_a_streaming_write_goes_on_after_its_executors_token_expired(
    spark,
    secured: StandaloneProcess,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    (source / "0.txt").write_text("".join(f"first-{i}\n" for i in range(100)))
    query = (
        spark.readStream.format("text")
        .load(str(source))
        .selectExpr("value AS event", "'k' AS routing_key")
        .writeStream.format("segstore")
        .options(
            **{**options(secured, "writer"), "stream": "tailwrite"}, checkpointLocation=str(tmp_path / "checkpoint")
        )
        .start()
    )
    try:
        query.processAllAvailable()
        time.sleep(TOKEN_TTL_S + 1)  # every token of the query's start has expired (time is the subject)
        (source / "1.txt").write_text("".join(f"second-{i}\n" for i in range(100)))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    read = spark.read.format("segstore").options(**{**options(secured, "reader"), "stream": "tailwrite"}).load()
    got = sorted(row.event.decode() for row in read.select("event").collect())
    assert got == sorted([f"first-{i}" for i in range(100)] + [f"second-{i}" for i in range(100)])
