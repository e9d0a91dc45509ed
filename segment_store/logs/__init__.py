"""Durable log: operations, data frames, the operation processor, metadata updates and checkpoints."""
