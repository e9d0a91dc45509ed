"""Tier-2 storage: chunk storage port and backends, Parquet chunk format (SLTS)."""
