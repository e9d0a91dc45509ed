"""The reading side of ``format("segstore")``: batch and streaming reads of a stream's events.

* ``source`` - the data source Spark sees (reads, and writes handed to :mod:`pravega_spark.write.sink`);
* driver: ``planning`` (micro-batch ends, segment ranges across scaling), ``splitting`` (ranges cut at event starts),
  ``several_streams`` (options ``streams`` / ``streamPattern``: which streams, a byte budget over them),
  ``metadata`` (option ``metadata``), ``subscription`` (option ``subscriber``), ``watermark_column`` (option
  ``watermarkColumn``);
* executors: ``partition_reader`` (a segment range as Arrow record batches), ``tier2_direct`` and
  ``tier2_locations`` (the part in Tier-2 straight from its Parquet chunks);
* ``lag`` - bytes behind the tail, from a streaming query's progress; ``streaming_runner`` - ending Spark's Python
  streaming runner quietly.
"""
