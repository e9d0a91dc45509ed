"""One client connection of the wire server: framing, handshake, dispatch, flow control, timeouts.

Flow control, so that no client can exhaust the server's memory:
- append bytes received but not yet acknowledged are counted per connection and for the whole
  process (:class:`FlowTracker`); above a high watermark the connection stops reading its
  socket (TCP pushes back on the client) and resumes below the low watermark (the bound is the
  watermark plus what one socket read delivers, at most 256 KiB, plus one frame);
- requests run at most ``max_concurrent_requests`` at a time; a peer that does not read our
  replies (its socket buffer fills, asyncio calls ``pause_writing``) gets no new request started
  and is not read from either, so its requests cannot pile up replies;
- the decoder holds at most one frame (<= 16 MiB) of unparsed input;
- a connection idle (no bytes) longer than ``idle_timeout_s`` is closed; clients send KeepAlive.

Small replies written in one turn of the event loop go out together, in order, in one socket write at
the start of the next turn (a Tier-1 write that completes appends of many writers costs one system call
per connection, not one per acknowledgement; :mod:`segment_store.protocol.cork`). Once ``CORK_BYTES``
are queued they go to the transport at once, so its write buffer (and ``pause_writing``) sees every
reply but those few bytes; closing sends what is queued first.

Malformed input (a bad frame, an unknown type, an append out of sequence) closes this
connection only; every other connection keeps working and nothing stored is touched.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, cast

from segment_store.containers.registry import ContainerRegistry
from segment_store.protocol import (
    Append,
    FrameDecoder,
    Hello,
    KeepAlive,
    SegmentCreated,
    SetupAppend,
    encode,
    local_hello,
    negotiate,
)
from segment_store.protocol.assembler import AppendAssembler
from segment_store.protocol.cork import FrameCork
from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.registry import WireCommand
from segment_store.server.appends import ConnectionAppends
from segment_store.server.config import ServerConfig
from segment_store.server.requests import RequestHandler
from segstore_shared.cluster.container_mapping import TRANSIENT_DELIMITER

log = logging.getLogger(__name__)


class FlowTracker:
    """Unacknowledged append bytes of every connection together; pauses and resumes connections."""

    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self.total_bytes = 0
        self.paused = False
        self.connections: set[ServerConnection] = set()

    def changed(self, delta: int) -> None:
        self.total_bytes += delta
        if not self.paused and self.total_bytes > self._config.process_high_watermark_bytes:
            self.paused = True
            for connection in self.connections:
                connection.update_reading()
        elif self.paused and self.total_bytes < self._config.process_low_watermark_bytes:
            self.paused = False
            for connection in list(self.connections):
                connection.update_reading()


class ServerConnection(asyncio.Protocol):
    def __init__(
        self,
        registry: ContainerRegistry,
        requests: RequestHandler,
        tracker: FlowTracker,
        config: ServerConfig,
        on_close: Callable[[ServerConnection], None] = lambda c: None,
    ) -> None:
        self._registry = registry
        self._requests = requests
        self._tracker = tracker
        self._config = config
        self._on_close = on_close
        self._decoder = FrameDecoder()
        self._assembler = AppendAssembler()
        self._transport: asyncio.Transport | None = None
        self._appends: ConnectionAppends | None = None
        self._hello_done = False
        self._outstanding = 0
        self._over_watermark = False
        self._write_paused = False
        self._reading_paused = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: deque[WireCommand] = deque()  # requests parsed but not started (bounded concurrency)
        self._running = 0
        self._transient: list[str] = []
        self._idle_handle: asyncio.TimerHandle | None = None
        self._last_activity = 0.0
        self._cork = FrameCork(self._send_out, self._call_soon)  # replies written in this turn of the loop
        self.peer = "?"

    # ---- asyncio.Protocol -----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        self._transport = transport
        self.peer = str(transport.get_extra_info("peername"))
        transport.set_write_buffer_limits(high=self._config.write_buffer_high_bytes)
        self._appends = ConnectionAppends(self._registry, self.send, self.send_frame, self.close, self._bytes_changed)
        self._tracker.connections.add(self)
        loop = asyncio.get_running_loop()
        self._last_activity = loop.time()
        self._idle_handle = loop.call_later(self._config.idle_timeout_s, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self._last_activity = asyncio.get_running_loop().time()
        try:
            self._decoder.feed(data)
            for command in self._decoder:
                self._dispatch(command)
                if self._transport is None or self._transport.is_closing():
                    return
        except ProtocolError as exc:
            log.warning("connection %s: malformed input, closing: %s", self.peer, exc)
            self.close()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def pause_writing(self) -> None:
        self._write_paused = True
        self.update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._start_requests()
        self.update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        if self._appends is not None:
            self._appends.close()
        for task in self._tasks:
            task.cancel()
        self._tracker.connections.discard(self)
        for name in self._transient:
            self._spawn(self._delete_transient(name))
        self._on_close(self)

    # ---- dispatch -------------------------------------------------------------------------------------------
    def _dispatch(self, command: WireCommand) -> None:
        if not self._hello_done:
            if not isinstance(command, Hello):
                raise ProtocolError(f"expected Hello first, got {type(command).__name__}")
            try:
                negotiate(command)
            except ProtocolError:
                self.send(local_hello())
                raise
            self._hello_done = True
            self.send(local_hello())
            return
        item = self._assembler.process(command)
        if item is None:
            return
        assert self._appends is not None
        if isinstance(item, Append):
            self._appends.append(item)
        elif isinstance(item, SetupAppend):
            refusal = self._requests.gate.refusal(item)
            if refusal is not None:  # no session: the writer's appends are dropped until a setup passes
                self.send(refusal)
            else:
                self._spawn(self._appends.setup(item))
        elif isinstance(item, KeepAlive):
            self.send(item)
        elif isinstance(item, Hello):
            negotiate(item)
        elif self._requests.handles(item):
            self._waiting.append(item)
            self._start_requests()
            if len(self._waiting) > self._config.max_queued_requests:
                self.update_reading()
        else:
            raise ProtocolError(f"{type(item).__name__} is not a request")

    def _start_requests(self) -> None:
        """Start waiting requests, at most ``max_concurrent_requests`` at once and none while the peer
        is not reading our replies, so replies in memory stay bounded."""
        while self._waiting and self._running < self._config.max_concurrent_requests and not self._write_paused:
            self._running += 1
            self._spawn(self._answer(self._waiting.popleft()))
        self.update_reading()

    async def _answer(self, command: WireCommand) -> None:
        try:
            await self._answer_one(command)
        finally:
            self._running -= 1
            if self._transport is not None:
                self._start_requests()

    async def _answer_one(self, command: WireCommand) -> None:
        reply = await self._requests.handle(command)
        if reply is None:
            self.close()
            return
        if isinstance(reply, SegmentCreated) and TRANSIENT_DELIMITER in reply.segment:
            self._transient.append(reply.segment)  # deleted when this connection closes, as in Java
        self.send(reply)

    async def _delete_transient(self, name: str) -> None:
        try:
            await self._registry.for_segment(name).delete_segment(name)
        except Exception as exc:  # the segment may be merged or gone; nothing else to do
            log.debug("transient segment %s not deleted: %r", name, exc)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- output and flow control ----------------------------------------------------------------------------
    def send(self, command: WireCommand) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._cork.write(encode(command))

    def send_frame(self, frame: bytes) -> None:
        """Send an already encoded reply (it goes out with the turn's other replies, like :meth:`send`'s)."""
        if self._transport is not None and not self._transport.is_closing():
            self._cork.write(frame)

    def _send_out(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    @staticmethod
    def _call_soon(callback: Callable[[], None]) -> None:
        asyncio.get_running_loop().call_soon(callback)

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._cork.flush()
            self._transport.close()

    def _bytes_changed(self, delta: int) -> None:
        self._outstanding += delta
        self._tracker.changed(delta)  # updates every connection's reading itself when the process flips
        over = self._over_watermark
        if self._outstanding > self._config.connection_high_watermark_bytes:
            over = True
        elif self._outstanding < self._config.connection_low_watermark_bytes:
            over = False
        if over is not self._over_watermark:  # twice per append: nothing to do unless the watermark flips
            self._over_watermark = over
            self.update_reading()

    def update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        pause = (
            self._over_watermark
            or self._write_paused
            or self._tracker.paused
            or len(self._waiting) > self._config.max_queued_requests
        )
        if pause and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
        elif not pause and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def _check_idle(self) -> None:
        loop = asyncio.get_running_loop()
        idle = loop.time() - self._last_activity
        if idle >= self._config.idle_timeout_s and not self._reading_paused and not self._tasks:
            log.info("connection %s: idle for %.0fs, closing", self.peer, idle)
            self.close()
            return
        wait = max(0.1, self._config.idle_timeout_s - idle)
        self._idle_handle = loop.call_later(wait, self._check_idle)

    @property
    def outstanding_bytes(self) -> int:
        return self._outstanding
