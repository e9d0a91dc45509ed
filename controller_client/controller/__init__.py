"""The gRPC controller client: the adapter behind the :class:`~controller_client.ports.ControllerApi` port.

* ``api``: :class:`ControllerClient`, every controller call of ``Controller.proto`` as a coroutine (streams,
  scopes, segments, transactions, reader groups, key-value tables);
* ``channel``: the controller URI (``tcp://`` or ``tls://``), :class:`ControllerClientConfig`, the TLS channel;
* ``transport``: the one ``grpc.aio`` channel, its deadlines, UNAVAILABLE retries and error mapping;
* ``bearer``: the caller's ``Bearer`` token, renewed before it expires;
* ``delegation_tokens``: the controller's delegation tokens for the segment stores (``StreamManager``'s token
  source);
* ``proto_convert``: the model to and from ``Controller.proto`` messages, shared with the controller service.
"""
