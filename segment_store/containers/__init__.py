"""Segment containers: metadata, the container itself, and the registry/manager that runs them."""
