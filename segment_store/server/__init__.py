"""The wire server and the composition root of a segment store process: the service (wiring Tier-1, Tier-2,
the containers, their table stores and the metrics), client connections, appends, the other requests, replies,
TLS and delegation tokens."""
