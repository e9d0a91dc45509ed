"""segstore control plane: Controller.proto gRPC service, stream metadata, workflows.

One component per subpackage, a few shared modules at the root; from the top layer down (the ``controller-layers``
contract in pyproject.toml: a layer imports only the layers below it, never one above):

* ``service`` - the composition root: one controller process (ZooKeeper session, cluster, metadata store, domain
  API and its periodic work, gRPC server, metrics endpoint);
* ``rpc/`` - the gRPC face: ``Controller.proto``'s ``ControllerService`` and segstore's admin extension;
* ``core`` - the domain API (Pravega's ``ControllerService``): what every RPC does;
* ``periodic/`` - the periodic work over the streams of the buckets this controller owns (transaction timeouts,
  resuming workflows, retention, watermarks, auto-scaling);
* ``workflows/``, ``kvt/`` - the multi-step changes to streams and transactions; the key-value tables;
* ``segment_ops``, ``policies/``, ``errors``, ``metrics`` - the calls into the segment stores, the policy decisions
  as pure functions, the domain API's errors, the metrics;
* ``metadata/``, ``cluster/``, ``config`` - the stream metadata store; the cluster component (leader election,
  container balancing, host store, the buckets of periodic work); the configuration.

Where a lower layer needs something of a higher one, it names it by a Protocol of its own
(:class:`controller.metrics.ObservedController`, :class:`controller.periodic.PeriodicCore`).
"""

from segstore_shared import compat as _compat

_compat.install()  # old import paths of moved modules, for one release (CHANGELOG.md 0.2.0)
