"""Spark against a standalone with authentication on: ``username``/``password`` on the driver, executors working
with the delegation token the driver got (the password never reaches them: the pickled reader partitions and sink
writer carry a token), a wrong password and a user without write permission refused naming the option."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
from auth_fixtures import write_password_file
from standalone_process import StandaloneProcess

from pravega_spark.read_options import ReadOptions
from pravega_spark.sink import SegstoreBatchWriter
from pravega_spark.source import SegstoreBatchReader

pytestmark = pytest.mark.slow
USERS = {
    "writer": ("writer-pw", "prn::*,READ_UPDATE"),
    "reader": ("reader-pw", "prn::/,READ;prn::/scope:sparksec/*,READ"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("spark-secured")
    write_password_file(base / "passwd", USERS)
    with StandaloneProcess(base / "data", extra_args=("--auth-password-file", str(base / "passwd"))) as process:
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
