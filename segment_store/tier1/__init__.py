"""Tier-1 durable data logs: the port (:mod:`.log`), an in-memory log, and the file ledger log."""
