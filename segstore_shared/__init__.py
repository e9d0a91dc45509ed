"""What several segstore services share, and the one door to it.

The engine (``segment_store``), the controller (``controller``), the client library (``controller_client``), the
Spark connector (``pravega_spark``) and the tools (``segstore_cli``) take what they have in common from here, and
from nowhere else in each other. This package imports no other segstore package (the ``shared`` contract of
import-linter in ``pyproject.toml`` checks it), so any of them can use it without pulling in another.

Modules:

- :mod:`~segstore_shared.errors`: the root of every error segstore raises on purpose (``SegstoreError``) and the
  ``retriable`` flag retry policies read; every package.
- :mod:`~segstore_shared.contracts`: the segment store's public contract (segment types, attributes, segment info,
  segment errors); the engine, its segment client and the controller's segment operations.
- :mod:`~segstore_shared.table_errors`: the errors of table segments; the engine's tables, its wire replies and
  its segment client.
- :mod:`~segstore_shared.chunk_format`: the Tier-2 chunk file as outside readers see it; written by the engine,
  read straight from Tier-2 by the Spark connector.
- :mod:`~segstore_shared.loop_thread`: ``LoopThread``, the event loop in a thread of its own behind every blocking
  wrapper (the segment client's, the client library's ``Blocking*`` classes, the Spark connector's).
- :mod:`~segstore_shared.metrics_http`: the ``/metrics``, ``/healthz`` and ``/readyz`` port of the segment store and
  controller processes.
- :mod:`~segstore_shared.processes`: child server processes: free ports, the launch loop (``ChildServer``) of the
  embedded ZooKeeper, NATS and SeaweedFS servers, stopping by pid, orphans, freezing, children that die with their
  parent (the tools' standalone and selftest supervisors).
- :mod:`~segstore_shared.compat`: the old import paths of modules that moved in 0.2.0, installed by each package's
  ``__init__`` for one release.

Subpackages:

- :mod:`~segstore_shared.auth`: passwords, access-control lists, delegation tokens, TLS and the authentication
  settings; the controller and the segment store check them, the client library and the tools present them.
- :mod:`~segstore_shared.coordination`: the coordination store port over ZooKeeper (kazoo, or in memory for tests),
  the watch helper, and the embedded ZooKeeper server; every service that coordinates.
- :mod:`~segstore_shared.cluster`: the cluster's records in ZooKeeper (paths, container assignment, host ids), the
  segment-to-container mapping and host registration; the controller places containers with them, segment stores
  follow them.
"""
