"""The factory of JetStream Tier-1 logs: one NATS connection per segment store process, shared by its logs."""

from __future__ import annotations

from segment_store.tier1.jetstream.client import JetStreamClient, JetStreamUnavailableError
from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.log import JetStreamLog
from segment_store.tier1.jetstream.records import HEADER_ROOM
from segment_store.tier1.jetstream.sync_check import warn_if_lazy
from segment_store.tier1.log import DataLogInitializationError, DataLogNotAvailableError, DataLogNotInitializedError
from segstore_shared.coordination.store import CoordinationStore

SYNC_CHECK_TIMEOUT_S = 5.0
"""How long one monitoring endpoint may take to answer ``/varz`` (the fsync check; an endpoint that does not
answer is named in a warning, and the log works on)."""


class JetStreamLogFactory:
    """``DurableDataLogFactory`` of JetStream logs named ``container-<id>``, over one NATS connection.

    The coordination store is shared and owned by the caller (the composition root); the
    NATS connection is this factory's.
    """

    def __init__(self, config: JetStreamLogConfig, store: CoordinationStore) -> None:
        self._config = config
        self._store = store
        self._client: JetStreamClient | None = None

    @property
    def config(self) -> JetStreamLogConfig:
        return self._config

    async def initialize(self) -> None:
        """Connect to NATS, then log a WARNING if the servers of ``config.monitors`` do not fsync before they
        acknowledge; raises DataLogNotAvailableError, DataLogInitializationError (``max_payload`` too small)."""
        if self._client is not None:
            return
        config = self._config
        try:
            client = await JetStreamClient.connect(
                config.servers,
                timeout_s=config.connect_timeout_s,
                request_timeout_s=config.request_timeout_s,
                tls_ca=config.tls_ca,
                creds=config.creds,
            )
        except JetStreamUnavailableError as exc:
            raise DataLogNotAvailableError(str(exc)) from exc
        needed = config.max_append_length_bytes + HEADER_ROOM
        if client.max_payload < needed:
            await client.close()
            raise DataLogInitializationError(
                f"NATS server {client.connected_url} accepts messages of at most {client.max_payload} bytes; "
                f"the Tier-1 log needs {needed} (a data frame plus headers): set max_payload: 2MB in the "
                "server configuration"
            )
        self._client = client
        await warn_if_lazy(config.servers, config.monitors, min(SYNC_CHECK_TIMEOUT_S, config.connect_timeout_s))

    def create_log(self, log_id: int) -> JetStreamLog:
        if log_id < 0:
            raise ValueError(f"log_id must be >= 0, got {log_id}")
        if self._client is None:
            raise DataLogNotInitializedError("the JetStream log factory is not initialized")
        return JetStreamLog(f"container-{log_id}", self._config, self._store, self._client)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
