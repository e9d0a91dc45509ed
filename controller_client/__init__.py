"""Client library: controller gRPC client, StreamManager, event writers and readers."""
