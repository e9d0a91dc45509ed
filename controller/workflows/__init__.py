"""Controller workflows: the multi-step changes to streams and transactions, resumable after a crash.

* ``streams`` - create, update, scale, truncate, seal, delete; the per-stream locks;
* ``transactions`` - create, ping, commit, abort, lease timeouts (on the locks of ``streams``).

They import the metadata store, the segment store calls, the controller's errors and its configuration; never the
periodic work, the key-value tables, the domain API, the RPC layer or the service.
"""
