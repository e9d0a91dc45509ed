"""``bench_ticks``: a trivial streaming Python data source that produces events on a clock, for the latency
cases of ``bench/spark.py`` (:mod:`spark_latency`): the floor of Spark's Python streaming data source path.

Offsets are wall-clock microseconds (``{"us": ...}``). ``latestOffset`` answers now; ``partitions(start, end)``
cuts ``(start, end]`` into ``partitions`` partitions; ``read`` yields one Arrow record batch of the events due
in its part at ``rowsPerSecond`` (event ``n`` is due at ``n / rowsPerSecond`` s since the epoch) in the segstore
source's schema, each event 100 B beginning with its due time as 16 ASCII digits of epoch microseconds and
its number in 12, the layout the latency writer uses for segstore events. No I/O, no connection, no framing:
what remains of a micro-batch is what Spark and its Python runners cost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from spark_sources import ARROW_SCHEMA, SCHEMA_DDL, make_batch

EVENT_BYTES = 100
STAMP_DIGITS = 16
NUMBER_DIGITS = 12


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    text = np.char.zfill(values.astype(str), width).astype(f"S{width}")
    return np.frombuffer(text.tobytes(), dtype=np.uint8).reshape(len(values), width)


def stamped_payloads(due_us: np.ndarray, numbers: np.ndarray, event_bytes: int = EVENT_BYTES) -> np.ndarray:
    """The payloads of events ``numbers`` due at ``due_us`` (int64 epoch us): the stamp in 16 ASCII digits,
    the number in 12, then ``.``s; one uint8 buffer of ``len(due_us) * event_bytes``."""
    block = np.full((len(due_us), event_bytes), ord("."), dtype=np.uint8)
    block[:, :STAMP_DIGITS] = _digits(due_us, STAMP_DIGITS)
    block[:, STAMP_DIGITS : STAMP_DIGITS + NUMBER_DIGITS] = _digits(numbers % 10**NUMBER_DIGITS, NUMBER_DIGITS)
    return block.reshape(-1)


def stamped_event(due_us: int, number: int, event_bytes: int = EVENT_BYTES) -> bytes:
    """One payload as :func:`stamped_payloads` makes it."""
    return b"%016d%012d" % (due_us, number % 10**NUMBER_DIGITS) + b"." * (event_bytes - STAMP_DIGITS - NUMBER_DIGITS)


@dataclass(frozen=True)
class TickPartition(InputPartition):
    first: int
    """Number of the first event (event n is due at n / rate s)."""
    count: int
    rate: int
    index: int


class TickStreamReader(DataSourceStreamReader):
    def __init__(self, options: Any) -> None:
        self.rate = int(options.get("rowsPerSecond", "2000"))
        self.parts = int(options.get("partitions", "2"))

    @staticmethod
    def _now() -> dict[str, Any]:
        return {"us": time.time_ns() // 1000}

    def initialOffset(self) -> dict[str, Any]:
        return self._now()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return self._now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        first = start["us"] * self.rate // 1_000_000 + 1  # events due in (start, end]
        last = end["us"] * self.rate // 1_000_000
        count = last - first + 1
        if count <= 0:
            return []
        share = -(-count // self.parts)
        return [
            TickPartition(first + i * share, min(share, count - i * share), self.rate, i)
            for i in range(self.parts)
            if count > i * share
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TickPartition)
        numbers = np.arange(partition.first, partition.first + partition.count, dtype=np.int64)
        rate = partition.rate  # numbers * 1e6 would overflow int64
        due_us = numbers // rate * 1_000_000 + numbers % rate * 1_000_000 // rate
        yield make_batch(stamped_payloads(due_us, numbers), partition.count, EVENT_BYTES, partition.index, 0)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release."""


class TickSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_ticks"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return TickStreamReader(self.options)  # case-insensitive: dict() would lower-case the keys


__all__ = ["ARROW_SCHEMA", "EVENT_BYTES", "TickSource", "stamped_event", "stamped_payloads"]
