"""Cluster membership and container placement, segment store side.

A segment store process in a cluster registers itself (:class:`HostRegistration`, an ephemeral
node per process) and follows the controller's container assignment
(:class:`ContainerAssignmentFollower`), starting and stopping containers as the assignment says.
The shared records (paths, the assignment's format, errors) are in :mod:`.assignment`; the
controller side is :mod:`controller.cluster`.
"""

from segment_store.cluster.follower import ContainerAssignmentFollower, ContainerRunner
from segstore_shared.cluster.layout import (
    ASSIGNMENT_PATH,
    LEADER_PATH,
    SEGMENT_STORES_PATH,
    AssignmentFormatError,
    ClusterError,
    ContainerAssignment,
    ContainerCountMismatchError,
    HostInfo,
    NoOwnerError,
    host_id,
    parse_host_id,
)
from segstore_shared.cluster.registration import HostRegistration

__all__ = [
    "ASSIGNMENT_PATH",
    "LEADER_PATH",
    "SEGMENT_STORES_PATH",
    "AssignmentFormatError",
    "ClusterError",
    "ContainerAssignment",
    "ContainerAssignmentFollower",
    "ContainerCountMismatchError",
    "ContainerRunner",
    "HostInfo",
    "HostRegistration",
    "NoOwnerError",
    "host_id",
    "parse_host_id",
]
