"""Cluster management, controller side: leader election, container balancing, the host store, and the buckets
of periodic work the controllers share (``buckets``: membership, bucket ownership, the ``WorkScope`` protocol the
periodic work runs within).

:class:`ClusterManager` composes them for a controller process. The shared records (ZooKeeper
paths, the assignment format, errors) live in :mod:`segstore_shared.cluster.layout`.

The lowest layer of the controller with :mod:`controller.config`: it imports only :mod:`segstore_shared`
(coordination store, cluster layout), never the rest of the controller.
"""

from controller.cluster.balancer import ContainerBalancer
from controller.cluster.balancing import moved_containers, rebalance
from controller.cluster.cluster_manager import ClusterManager
from controller.cluster.election import LeaderElection
from controller.cluster.host_store import HostStore

__all__ = ["ClusterManager", "ContainerBalancer", "HostStore", "LeaderElection", "moved_containers", "rebalance"]
