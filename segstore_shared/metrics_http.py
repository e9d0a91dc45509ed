"""The metrics port of a server process: ``/metrics``, ``/healthz`` and ``/readyz`` over plain HTTP/1.1.

A tiny asyncio server on the process's own event loop (no thread: scrape-time gauges read the process's
state where it lives, without locks). One request per connection, then close; no keep-alive, no body.

- ``/metrics``: the registry in Prometheus' text format (``refresh`` runs first, when given: levels the
  process must look up, such as the controller's stream counts);
- ``/healthz``: 200 while the process runs (it answers at all);
- ``/readyz``: 200 once ``ready()`` holds (segment store: every container assigned here recovered;
  controller: serving RPCs), 503 before;
- any path of ``documents``: a JSON document its function builds from the query string (the segment store's
  ``/stalls``: recent event-loop stalls, :mod:`segstore_shared.loop_stalls`); a ``ValueError`` is a 400.

Used by both :class:`~segment_store.server.service.SegmentStoreService` and the controller's service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from segstore_shared.ports import PortInUseError, is_address_in_use

log = logging.getLogger(__name__)

_REQUEST_TIMEOUT_S = 10.0
_MAX_HEAD_BYTES = 8192
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class MetricsServer:
    """Serves ``registry`` and the health endpoints on ``host:port`` (0: a free port) once :meth:`start`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], bool],
        refresh: Callable[[], Awaitable[None]] | None = None,
        documents: Mapping[str, Callable[[str], bytes]] | None = None,
    ) -> None:
        self._registry = registry
        self._documents = {path.encode(): build for path, build in (documents or {}).items()}
        self._ready = ready
        self._refresh = refresh
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (exclusively: no ``SO_REUSEPORT``); PortInUseError if something else does."""
        try:
            self._server = await asyncio.start_server(self._serve, host, port, limit=_MAX_HEAD_BYTES, reuse_port=False)
        except OSError as error:
            if is_address_in_use(error):
                raise PortInUseError("metrics port", host, port) from None
            raise

    @property
    def endpoint(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
                status, content_type, body = await self._answer(head)
                method = head.split(b" ", 1)[0]
                reason = _REASONS.get(status, "")
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                )
                if method != b"HEAD":
                    writer.write(body)
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            log.debug("metrics request dropped: %r", exc)
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3:
            return 400, "text/plain", b"bad request\n"
        method, (target, _, query) = parts[0], parts[1].partition(b"?")
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"GET or HEAD only\n"
        if target == b"/metrics":
            if self._refresh is not None:
                await self._refresh()
            return 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
        if target == b"/healthz":
            return 200, "text/plain", b"ok\n"
        if target == b"/readyz":
            if self._ready():
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        build = self._documents.get(target)
        if build is not None:
            try:
                return 200, "application/json", build(query.decode("ascii", "replace"))
            except ValueError as error:
                return 400, "text/plain", f"bad query: {error}\n".encode()
        return 404, "text/plain", b"not found: /metrics, /healthz, /readyz\n"
