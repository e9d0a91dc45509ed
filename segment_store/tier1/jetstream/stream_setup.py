"""Creating a log's JetStream stream and waiting out leader elections: the set-up half of
:class:`~segment_store.tier1.jetstream.log.JetStreamLog`, which calls these while it takes a log over.

Invariants: a brand-new log's stream is created before its metadata, and refused if it already holds records (a
stream without metadata has no record of what was acknowledged); a call made while JetStream elects a leader is
retried, every 0.1 s, until ``stream_ready_timeout_s`` has passed since the first attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from segment_store.tier1.jetstream.client import (
    ERR_STREAM_NAME_IN_USE,
    JetStreamClient,
    JetStreamRequestError,
    JetStreamUnavailableError,
    StreamState,
)
from segment_store.tier1.jetstream.config import JetStreamLogConfig, stream_config
from segment_store.tier1.log import DataLogCorruptedError

_T = TypeVar("_T")
ERR_INSUFFICIENT_RESOURCES = 10023
RETRY_DELAY_S = 0.1


async def while_electing(config: JetStreamLogConfig, call: Callable[[], Awaitable[_T]]) -> _T:
    """``call()``, again while JetStream is unavailable (a leader being elected), for ``stream_ready_timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.stream_ready_timeout_s
    while True:
        try:
            return await call()
        except JetStreamUnavailableError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(RETRY_DELAY_S)


async def settled_state(
    config: JetStreamLogConfig, client: JetStreamClient, stream: str, at_least: int | None
) -> StreamState:
    """The stream's state (retried while a leader is elected); while its last sequence is below ``at_least`` (the
    sequence the log recorded as acknowledged) it is read again for up to ``request_timeout_s``: a leader elected
    moments ago may answer before it has applied every committed record (the self-test saw a stream one record
    short of an acknowledged one right after NATS node faults, complete the next moment), while a stream that was
    rolled back stays short."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.request_timeout_s
    while True:
        state: StreamState = await while_electing(config, lambda: client.stream_state(stream))
        if at_least is None or state.last_seq >= at_least or loop.time() >= deadline:
            return state
        await asyncio.sleep(RETRY_DELAY_S)


async def create_log_stream(client: JetStreamClient, config: JetStreamLogConfig, log_name: str, stream: str) -> None:
    """Create the stream of the brand-new log ``log_name`` (before its metadata); retries while the cluster elects
    leaders. A stream that exists already is fine if it is empty, refused if it holds records."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.stream_ready_timeout_s
    while True:
        try:
            await client.create_stream(stream_config(config, log_name))
            break
        except JetStreamUnavailableError:
            if loop.time() >= deadline:
                raise
        except JetStreamRequestError as exc:
            if exc.err_code == ERR_STREAM_NAME_IN_USE:
                break  # there, with another configuration: checked below
            if exc.err_code != ERR_INSUFFICIENT_RESOURCES or loop.time() >= deadline:
                raise JetStreamRequestError(
                    f"cannot create stream {stream} with {config.replicas} replicas "
                    f"(are there that many JetStream servers in the NATS cluster?): {exc.description}",
                    exc.code,
                    exc.err_code,
                ) from exc
        await asyncio.sleep(RETRY_DELAY_S)
    state: StreamState = await while_electing(config, lambda: client.stream_state(stream))
    if state.last_seq > 0:
        raise DataLogCorruptedError(
            f"log {log_name}: stream {stream} already holds records (up to {state.last_seq}) but the log "
            f"has no metadata in the coordination store; refusing to guess which are acknowledged"
        )
