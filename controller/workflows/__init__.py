"""Controller workflows: the multi-step changes to streams and transactions, resumable after a crash."""
