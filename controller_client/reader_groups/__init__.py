"""Reader groups: readers in any processes sharing streams, each segment read by one, with checkpoints.

* ``group``: :class:`ReaderGroup` (made or opened by ``StreamManager``), its readers, checkpoints and resets;
* ``reader``: :class:`EventStreamReader`, a member reading the segments the group assigns it;
* ``state``: the operations on the group's state (assignment, positions, checkpoints, readers going offline);
* ``table``: the group's table segment, mirrored, with optimistic updates;
* ``format`` / ``cbor_subset``: that state byte for byte in the official Rust client's format, so its readers can
  join our groups.
"""
