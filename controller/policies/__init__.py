"""Policy decisions (retention, auto-scaling, stream cuts) as pure functions; the periodic work that applies them
lives in :mod:`controller.periodic`.

Imports only the metadata records (:mod:`controller.metadata.records`) and the client library's model types:
no I/O, no store, nothing above the metadata.
"""
