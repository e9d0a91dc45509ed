"""The cluster as the controller and the segment stores both see it.

- :mod:`~segstore_shared.cluster.layout`: the records in ZooKeeper: their paths, the container assignment (which
  host owns which containers, written by the leader controller's balancer), host ids and ``HostInfo``.
- :mod:`~segstore_shared.cluster.container_mapping`: which container owns a segment (Pravega's
  ``SegmentToContainerMapper``); the controller routes clients with it, segment stores check requests with it.
- :mod:`~segstore_shared.cluster.registration`: ``HostRegistration``, an ephemeral node kept in place while a
  process lives (a segment store's announcement; the controller's membership and bucket claims).
"""
