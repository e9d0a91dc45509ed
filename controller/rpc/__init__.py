"""The gRPC face of the controller: ``Controller.proto``'s ``ControllerService`` over ``grpc.aio``."""
