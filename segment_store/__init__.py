"""segstore's data plane: the segment store service (engine, wire protocol, server)."""

__version__ = "0.1.0"
