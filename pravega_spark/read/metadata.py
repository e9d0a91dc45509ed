"""Option ``metadata`` of batch reads, as the Pravega Spark connector has it: rows about the scope or the stream
instead of its events.

* ``metadata=Streams``: one row per stream of the scope, ``scope_name string, stream_name string`` (option
  ``stream`` may be left out);
* ``metadata=StreamInfo``: one row, ``head_stream_cut string, tail_stream_cut string``: the stream's head (its
  first readable position) and tail (everything written so far is before it) as the Pravega client's
  ``StreamCut.asText()`` writes them (:mod:`pravega_spark.options.stream_cut_text`), which ``startingOffsets``/
  ``endingOffsets`` (``start_stream_cut``/``end_stream_cut``) take back.

The driver looks the rows up when Spark plans the read (with the driver's credentials) and hands them to the one
task in its input partition, so executors connect to nothing. Streaming reads refuse the option.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StringType, StructField, StructType

from controller_client.controller.api import ControllerClient
from controller_client.errors import ScopeNotFoundError
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.offsets import head_cut, tail_cut
from pravega_spark.options.read import MetadataMode, ReadOptions
from pravega_spark.options.stream_cut_text import stream_cut_to_base64

SCHEMAS: dict[MetadataMode, StructType] = {
    "Streams": StructType([StructField("scope_name", StringType()), StructField("stream_name", StringType())]),
    "StreamInfo": StructType(
        [StructField("head_stream_cut", StringType()), StructField("tail_stream_cut", StringType())]
    ),
}


@dataclass(frozen=True)
class MetadataPartition(InputPartition):
    """The rows, looked up by the driver."""

    rows: tuple[tuple[str, str], ...]


class SegstoreMetadataReader(DataSourceReader):
    """``spark.read.format("segstore").option("metadata", ...)``: see the module docstring."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        assert options.metadata is not None
        if schema != SCHEMAS[options.metadata]:
            raise ValueError(
                f"segstore: the schema of metadata={options.metadata} is fixed "
                f"({SCHEMAS[options.metadata].simpleString()}), got {schema.simpleString()}"
            )
        self.options = options
        self.mode: MetadataMode = options.metadata

    def partitions(self) -> list[InputPartition]:
        target = self.options.target
        with StreamConnection(target.controller, self.options.controller_timeout_s, credentials=target) as connection:
            if self.mode == "Streams":
                try:
                    names = connection.run(_stream_names(connection.controller, target.scope))
                except ScopeNotFoundError:
                    raise SegstoreOptionError("scope", f"scope {target.scope} does not exist") from None
                rows = tuple((target.scope, name) for name in sorted(names))
            else:
                connection.require_stream(target.scope, target.stream)
                head = head_cut(connection, target.scope, target.stream)
                tail = tail_cut(connection, target.scope, target.stream)
                rows = ((stream_cut_to_base64(head), stream_cut_to_base64(tail)),)
        return [MetadataPartition(rows)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, str]]:
        if isinstance(partition, MetadataPartition):
            yield from partition.rows


async def _stream_names(controller: ControllerClient, scope: str) -> list[str]:
    return [name async for name in controller.list_streams(scope)]
