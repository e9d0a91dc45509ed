"""Reading streams without a group.

* ``stream_reader``: :class:`StreamReader`, a stream's events between two stream cuts (or following the tail),
  segment by segment in successor order; ``read_segment_range`` for the raw bytes of one segment.

Readers sharing streams with checkpoints are in :mod:`controller_client.reader_groups`.
"""
