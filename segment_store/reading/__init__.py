"""Read index and cache: serving reads from memory, Tier-2 and the tail (future reads)."""
