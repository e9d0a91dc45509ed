"""Test helpers around real NATS JetStream servers (the servers themselves come from ``tests/conftest.py``)."""

from __future__ import annotations

import nats

from segment_store.tier1.jetstream.config import JetStreamLogConfig


async def delete_streams(servers: tuple[str, ...] | list[str], prefix: str) -> int:
    """Delete every stream whose name starts with ``prefix`` (a test's own); returns how many."""
    connection = await nats.connect(servers=list(servers), connect_timeout=5)
    try:
        manager = connection.jsm(timeout=10)
        names = [info.config.name for info in await manager.streams_info()]
        doomed = [name for name in names if name and name.startswith(prefix)]
        for name in doomed:
            await manager.delete_stream(name)
        return len(doomed)
    finally:
        await connection.close()


def log_config(servers: list[str], prefix: str, replicas: int, **overrides: object) -> JetStreamLogConfig:
    """A JetStream log configuration whose streams and subjects are the test's own."""
    values: dict[str, object] = {
        "servers": tuple(servers),
        "replicas": replicas,
        "stream_prefix": prefix,
        "subject_prefix": f"{prefix}.tier1",
    }
    values.update(overrides)
    return JetStreamLogConfig(**values)  # type: ignore[arg-type]
