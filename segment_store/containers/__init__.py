"""Segment containers: the container (one shard of the segment store, composing its durable log, read index
and cache, storage writer and Tier-2 segment storage), its configuration, and the registry that runs a
process's containers and routes segment names to them. The model they keep is :mod:`segment_store.metadata`."""
