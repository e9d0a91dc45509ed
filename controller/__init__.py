"""segstore control plane: Controller.proto gRPC service, stream metadata, workflows."""
