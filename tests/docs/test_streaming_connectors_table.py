"""docs/spark.md "Coming from Kafka or Pulsar": the segstore column names options this connector takes (the
registry, :data:`pravega_spark.options.names.OPTIONS`), and the Kafka column names options Spark's Kafka connector
takes (written down here from the Structured Streaming + Kafka Integration Guide, Spark 4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pravega_spark.options.names import is_registered

pytestmark = pytest.mark.unit

SPARK_PAGE = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
HEADER = '| segstore | Kafka (`format("kafka")`) | Pulsar (`format("pulsar")`) | what differs |'

KAFKA_OPTIONS = {
    "assign",
    "subscribe",
    "subscribePattern",
    "kafka.bootstrap.servers",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "endingOffsets",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "groupIdPrefix",
    "kafka.group.id",
    "includeHeaders",
    "startingOffsetsByTimestampStrategy",
    "topic",
    "kafka.security.protocol",
    "kafka.ssl.truststore.location",
    "kafka.sasl.jaas.config",
}


def _rows() -> list[list[str]]:
    text = SPARK_PAGE.read_text()
    assert text.count(HEADER) == 1
    rows = []
    for line in text[text.index(HEADER) :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip()[1:-1].split("|")])
    return rows


def test_the_segstore_column_names_only_options_of_this_connector() -> None:
    rows = _rows()
    assert len(rows) > 15
    for cells in rows:
        assert len(cells) == 4, cells
        for name in re.findall(r"`([^`]+)`", cells[0]):
            assert is_registered(name, None), f"{name} is not an option of format('segstore')"


def test_the_kafka_column_names_options_of_sparks_kafka_connector() -> None:
    named = {name for cells in _rows() for name in re.findall(r"`([^`]+)`", cells[1])}
    assert named <= KAFKA_OPTIONS, named - KAFKA_OPTIONS
