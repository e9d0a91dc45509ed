"""The gRPC face of the controller: ``Controller.proto``'s ``ControllerService`` over ``grpc.aio``, and segstore's
admin extension.

From the top (the ``controller-rpc-layers`` contract in pyproject.toml): ``servicer`` (the servicer assembled from
its parts, the server) > the RPC groups ``streams``, ``txns``, ``kvts``, ``admin`` (independent of each other) >
``handling`` (the error mapping, the metrics and the authentication check around every call) > ``authentication``
(who is calling) > ``authorization`` (what each RPC needs) > ``admin_requests`` (the admin extension's JSON).

The package sits just below the composition root: it may import the domain API (:mod:`controller.core`) and
everything below it, never :mod:`controller.service`.
"""
