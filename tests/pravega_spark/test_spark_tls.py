"""Spark over TLS: the sink and the source with ``controller=tls://localhost:PORT`` and ``trustStore``.

The executors (Python workers of the local session) make their own connections from the options, so this
checks that the trust store path reaches them; a file missing at that path fails naming ``trustStore``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess
from tls_fixtures import TlsFiles, make_tls_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_standalone(tmp_path_factory: pytest.TempPathFactory, files: TlsFiles) -> Iterator[StandaloneProcess]:
    flags = ("--tls-cert", str(files.cert), "--tls-key", str(files.key))
    with StandaloneProcess(tmp_path_factory.mktemp("tls-standalone"), extra_args=flags) as process:
        yield process


def _options(process: StandaloneProcess, trust_store: Path, stream: str) -> dict[str, str]:
    return {
        "controller": f"tls://localhost:{process.controller_port}",
        "trustStore": str(trust_store),
        "scope": "sparktls",
        "stream": stream,
    }


def test_write_then_read_over_tls(spark, tls_standalone: StandaloneProcess, files: TlsFiles) -> None:  # type: ignore[no-untyped-def]
    options = _options(tls_standalone, files.ca, "events")
    rows = spark.range(0, 3_000, numPartitions=3).selectExpr(
        "cast(id as string) as event", "cast(id % 7 as string) as routing_key"
    )
    rows.write.format("segstore").options(**options, defaultNumSegments="2").mode("append").save()
    read = spark.read.format("segstore").options(**options).load()
    events = sorted(int(row.event.decode()) for row in read.select("event").collect())
    assert events == list(range(3_000))


def test_missing_trust_store_fails_naming_the_option(spark, tls_standalone: StandaloneProcess, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    options = _options(tls_standalone, tmp_path / "absent.pem", "events")
    with pytest.raises(Exception, match=r"option 'trustStore': .*absent\.pem: no such file"):
        spark.read.format("segstore").options(**options).load().collect()
