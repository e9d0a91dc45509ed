"""The gRPC controller client: the adapter behind the :class:`~controller_client.ports.ControllerApi` port.

* ``api``: :class:`ControllerClient`, every controller call of ``Controller.proto`` as a coroutine (streams,
  scopes, segments, transactions, reader groups, key-value tables);
* ``uri``: the controller URI: one scheme (``tcp://`` or ``tls://``), one controller or a comma-separated list;
* ``channel``: :class:`ControllerClientConfig`, a controller's (TLS) channel, the messages for what went wrong;
* ``transport``: a ``grpc.aio`` channel per controller, deadlines, UNAVAILABLE retries, failover, error mapping;
* ``bearer``: the caller's ``Bearer`` token, renewed before it expires;
* ``delegation_tokens``: the controller's delegation tokens for the segment stores (``StreamManager``'s token
  source);
* ``proto_convert``: the model to and from ``Controller.proto`` messages, shared with the controller service.
"""
