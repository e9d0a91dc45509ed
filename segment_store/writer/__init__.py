"""The storage writer of a container: moves committed operations from the durable log (Tier-1) to Tier-2,
one aggregator per segment."""
