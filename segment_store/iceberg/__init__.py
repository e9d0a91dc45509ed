"""Every opted-in stream an Apache Iceberg table, kept by the segment store (docs/iceberg.md).

The stream's chunk files (Tier-2 Parquet, :mod:`segstore_shared.chunk_format` format 2) are the table's data
files, registered in place as they become final: no copy, segstore stays their owner and only writer.

* :mod:`.config`: :class:`~.config.IcebergConfig` (which streams, which catalog, how often, how much history).
* :mod:`.names`: which stream and segment a segment name is.
* :mod:`.stream_table`: the table's schema and data files (pyiceberg; blocking).
* :mod:`.sync`: one table brought up to date with its chunk files in one commit, and its pins (blocking).
* :mod:`.truncation`: the truncation boundary chunk as a trimmed copy (blocking).
* :mod:`.cleanup`: a table directory's files no kept snapshot refers to, deleted wherever its FileIO reaches.
* :mod:`.status`: what the maintainer knows of each table after a pass (snapshot, files, lag, failures).
* :mod:`.maintainer`: the passes over the containers running here, each handed to the worker process.
* :mod:`.worker`: the worker process (every pyiceberg call: the syncs, their statuses); :mod:`.worker_process`:
  the segment store's end of it (started, restarted, killed when hung; the pins it asks for).

Layer: above Tier-2 (:mod:`segment_store.storage`: its chunk metadata and pins), beside the storage writer;
wired by the server's composition root. pyiceberg is imported only when a table is opened.
"""
