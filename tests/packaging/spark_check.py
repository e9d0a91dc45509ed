"""A small Spark job through ``format("segstore")`` and ``format("segstore-kvt")``, found by pyspark's own discovery.

``test_install_modes.py`` copies this file out of the repository and runs it with the interpreter of a fresh venv,
from a directory outside the repository, so nothing but the install makes the data sources visible: no
``pravega_spark.register``, no repository on ``sys.path``. Usage: ``python spark_check.py CONTROLLER_URI STREAM``.
Prints one JSON line (``RESULT {...}``) with what it read and where the modules came from; any failure (e.g.
``DATA_SOURCE_NOT_FOUND``) ends it with a traceback and a non-zero exit code.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main(controller: str, stream: str) -> dict[str, object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv too
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    import pravega_spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(f"segstore-install-{stream}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        options = {"controller": controller, "scope": "install", "stream": stream}
        events = spark.range(100).selectExpr("concat('event-', id) AS event", "concat('key-', id % 7) AS routing_key")
        events.write.format("segstore").options(**options, defaultNumSegments="2").mode("append").save()
        batch_rows = spark.read.format("segstore").options(**options).load().count()
        query = (
            spark.readStream.format("segstore")
            .options(**options, startingOffsets="earliest")
            .load()
            .writeStream.format("memory")
            .queryName("install_check")
            .option("checkpointLocation", tempfile.mkdtemp(dir="."))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        streaming_rows = spark.table("install_check").count()
        try:  # found: our strict options refuse the misspelt name (not Spark's DATA_SOURCE_NOT_FOUND)
            kvt = spark.read.format("segstore-kvt").options(controller=controller, scope="install", tabel="t")
            kvt.load().collect()
            kvt_error = ""
        except PySparkException as error:  # the source's error, as Spark hands it back
            kvt_error = str(error)
        return {
            "batch_rows": batch_rows,
            "streaming_rows": streaming_rows,
            "kvt_error": kvt_error[:2000],
            "pravega_spark": pravega_spark.__file__,
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
