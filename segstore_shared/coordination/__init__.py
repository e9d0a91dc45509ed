"""Coordination over ZooKeeper: the embedded server launcher and the versioned coordination store port."""
