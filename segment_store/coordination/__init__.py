"""Coordination over ZooKeeper: the embedded server launcher and (later) the coordination port."""
