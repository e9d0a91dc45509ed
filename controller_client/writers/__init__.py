"""Writing to streams.

* ``event_writer``: :class:`EventStreamWriter`, events routed by routing key to segments, one append session per
  segment, scaling followed without loss or duplicates;
* ``txn_writer``: :class:`TransactionalEventStreamWriter` and its :class:`Transaction`, all-or-nothing writes;
* ``pending_events``: the events a writer holds for a segment until they are stored;
* ``routing``: routing keys to key-space positions and segments, with Pravega's hash (also used by ``kvt``).
"""
