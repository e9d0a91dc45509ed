"""Coordination over ZooKeeper, shared by every service that coordinates.

- :mod:`~segstore_shared.coordination.store`: the port, ``CoordinationStore``: a small versioned key-value store
  over ZooKeeper-style paths (ephemeral nodes, compare-and-set, linearized reads, data and children watches, session
  listeners) and its errors. The Tier-1 logs' metadata, the segment store's cluster membership, the controller's
  metadata store, leader election and bucket ownership use it.
- :mod:`~segstore_shared.coordination.kazoo_store`: the port over real ZooKeeper through kazoo (every run mode).
- :mod:`~segstore_shared.coordination.memory_store`: the port in process, with simulated sessions (unit tests only).
  Both pass one contract suite (``tests/segstore_shared/coordination/test_coordination_*.py``).
- :mod:`~segstore_shared.coordination.watches`: ``StoreWatches``, the watches, session listener and task one object
  keeps on a store, started and stopped together; its docstring says when and where callbacks run, and what happens
  on session loss and on stop.
- :mod:`~segstore_shared.coordination.zookeeper_server`: a real ZooKeeper server (or ensemble) as child processes,
  from the jars inside pyspark (standalone mode, selftest, ``segstore zookeeper``, the tests).
"""
