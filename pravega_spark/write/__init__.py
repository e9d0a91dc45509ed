"""The sink of ``format("segstore")``: ``df.write`` and ``df.writeStream`` into a stream.

* ``sink`` - the batch and streaming writers (exactly-once through transactions by default);
* ``commit_log`` - the durable record of micro-batches and the exactly-once commit of a batch's transactions;
* ``plain`` - the at-least-once write task (``exactlyOnce=false``);
* ``framing`` - rows routed over segments and framed into wire blocks column-wise;
* ``connection`` - the sink's controller connections (connecting, creating the stream, the executors' token).

Nothing here imports :mod:`pravega_spark.read`.
"""
