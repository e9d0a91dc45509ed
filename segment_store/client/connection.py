"""One client connection to a segment store: the codec over an asyncio transport.

:class:`Connection` is an ``asyncio.Protocol``: bytes from the socket go through a
:class:`~segment_store.protocol.FrameDecoder` and each reply is dispatched at once, on the event loop,
with no task switch per reply:

* ``DataAppended`` goes to the append session registered for its writer id (``on_appended``), and so do
  ``ConditionalCheckFailed`` and ``InvalidEventNumber`` (``on_reply``);
* any other reply goes to the one-shot future of its ``request_id`` (:meth:`Connection.request`), or
  else to the session registered under that request id (failures of appends carry the request id the
  session's blocks were sent with);
* ``Hello`` completes the handshake; ``KeepAlive`` echoes are dropped (they only prove the peer alive:
  a connection on which nothing arrives for ``silent_peer_timeout_ms`` is aborted as dead).

Acknowledgements are most of what a connection carrying many append sessions reads (one per block), so
whole ``DataAppended`` frames of registered writers at the front of the unread bytes are taken straight
from them (one ``struct`` per frame, the session found by the writer id's 16 bytes); anything else, and
everything after it, goes through the decoder. Both paths hand the session the same ``on_appended``
call, in wire order.

Sending: small frames written in one turn of the event loop go out together, in order, in one socket
write at the start of the next turn (a reply that releases blocks of many writers costs one system call,
not one each; :mod:`segment_store.protocol.cork`); once ``CORK_BYTES`` are queued they go at once.
:meth:`Connection.close` sends what is queued before closing; :meth:`Connection.abort` and a failure
drop it.

Ordering: replies are dispatched in wire order. Failure: when the transport fails, the peer closes, a
frame cannot be decoded, or :meth:`Connection.close` is called, every pending request fails with
:class:`~segment_store.client.errors.ConnectionLostError` (retriable) and every registered session is
told through ``on_connection_lost``; the connection is then dead for good (the pool drops it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import uuid
from collections.abc import Sequence
from typing import Protocol, TypeVar, cast

from segment_store.client.config import ConnectionConfig
from segment_store.client.errors import (
    ConnectionLostError,
    RequestTimeoutError,
    TlsError,
    UnexpectedReplyError,
    connect_failure,
    error_for_reply,
    is_failure_reply,
    tls_failure,
)
from segment_store.protocol import (
    DATA_APPENDED_FRAME,
    ConditionalCheckFailed,
    DataAppended,
    FrameDecoder,
    Hello,
    InvalidEventNumber,
    KeepAlive,
    ProtocolError,
    WireCommand,
    encode,
    local_hello,
    negotiate,
)
from segment_store.protocol.cork import FrameCork
from segstore_shared import deadline

_log = logging.getLogger(__name__)

Endpoint = tuple[str, int]
R = TypeVar("R", bound=WireCommand)

_WRITER_REPLIES = frozenset(c.TYPE_CODE for c in (ConditionalCheckFailed, InvalidEventNumber))
_APPENDED_CODE = DataAppended.TYPE_CODE
_APPENDED_LENGTH = DATA_APPENDED_FRAME.size - 8  # its header's length field
_KEEPALIVE_CODE = KeepAlive.TYPE_CODE
_HELLO_CODE = Hello.TYPE_CODE
_WRITE_HIGH_WATER = 4 * 1024 * 1024
_request_ids = itertools.count(1)


def next_request_id() -> int:
    """A request id unique in this process (so any connection can carry any request)."""
    return next(_request_ids)


class ReplyListener(Protocol):
    """What an append session implements to receive the replies of its writer id on a connection.

    Both callbacks run on the event loop inside the connection's dispatch and must not block or raise.
    """

    def on_appended(self, connection: Connection, event_number: int, write_offset: int) -> None:
        """``DataAppended``: the writer's events up to ``event_number`` are stored (the segment's length is
        ``write_offset``, -1 if the server did not say)."""

    def on_reply(self, connection: Connection, reply: WireCommand) -> None: ...

    def on_connection_lost(self, connection: Connection, error: ConnectionLostError) -> None: ...


class Connection(asyncio.Protocol):
    """A multiplexed request/reply connection; see the module docstring for dispatch and failure rules.

    Build one with :func:`open_connection` (or hand a transport to ``connection_made`` in tests). Not
    thread-safe: use it from its event loop only.
    """

    def __init__(self, endpoint: Endpoint, config: ConnectionConfig | None = None) -> None:
        self.endpoint = endpoint
        self.config = config or ConnectionConfig()
        self.wire_version: int | None = None
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._pending: dict[int, asyncio.Future[WireCommand]] = {}
        self._routes: dict[int, ReplyListener] = {}
        self._writers: dict[bytes, ReplyListener] = {}  # by the writer id's 16 bytes
        loop = asyncio.get_running_loop()
        self._hello: asyncio.Future[Hello] = loop.create_future()
        self._closed: asyncio.Future[None] = loop.create_future()
        self._error: ConnectionLostError | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._keepalive: asyncio.Task[None] | None = None
        self._heard = True  # something arrived since the keep-alive task last looked
        self._loop = loop
        self._cork = FrameCork(self._send_out, loop.call_soon)  # frames written in this turn of the loop

    # ---- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        with contextlib.suppress(AttributeError, NotImplementedError):
            self._transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self._transport.write(encode(local_hello()))

    def data_received(self, data: bytes) -> None:
        if self._error is not None:
            return
        self._heard = True
        decoder = self._decoder
        if not decoder.buffered_bytes:
            start = self._take_acks(data)
            if start == len(data) or self._error is not None:
                return
        else:
            start = 0
        try:
            decoder.feed(memoryview(data)[start:] if start else data)
            for command in decoder:
                self._dispatch(command)
        except ProtocolError as exc:
            _log.warning("closing connection to %s: %s", self.endpoint, exc)
            self._fail(ConnectionLostError(f"protocol error from server: {exc}", self.endpoint), abort=True)

    def _take_acks(self, data: bytes) -> int:
        """Hand the whole ``DataAppended`` frames of registered writers at the front of ``data`` to their
        sessions; return where the rest starts (the decoder's). Stops if a session fails the connection."""
        pos = 0
        end = len(data) - DATA_APPENDED_FRAME.size
        writers = self._writers
        unpack = DATA_APPENDED_FRAME.unpack_from
        while pos <= end:
            code, length, writer_id, event_number, _, _, write_offset = unpack(data, pos)
            if code != _APPENDED_CODE or length != _APPENDED_LENGTH:
                break
            listener = writers.get(writer_id)
            if listener is None:
                break
            pos += DATA_APPENDED_FRAME.size
            listener.on_appended(self, event_number, write_offset)
            if self._error is not None:
                break
        return pos

    def eof_received(self) -> bool:
        if not self._hello.done():
            self._fail(self._closed_before_hello(None))
        else:
            self._fail(ConnectionLostError("server closed the connection", self.endpoint))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._hello.done():
            self._fail(self._closed_before_hello(exc))
        else:
            reason = f"connection lost: {exc}" if exc else "connection closed"
            self._fail(ConnectionLostError(reason, self.endpoint))
        if not self._closed.done():
            self._closed.set_result(None)

    def _closed_before_hello(self, exc: Exception | None) -> ConnectionLostError:
        """Why the server ended the connection before its ``Hello``. With TLS (1.3) that comes right after a
        handshake the client saw succeed: the server refused the client's certificate, or wanted one."""
        tls = self.config.tls
        if tls is None:
            return ConnectionLostError(
                "server closed the connection before its Hello (does it want TLS?)", self.endpoint
            )
        if isinstance(exc, ssl.SSLError):
            return tls_failure(exc, self.endpoint, tls.describe())
        if tls.cert_path is None:
            why = "it requires a client certificate (mutual TLS, its --tls-ca) and this client has none"
        else:
            why = f"it did not accept the client certificate {tls.cert_path} (is it signed by the CA of its --tls-ca?)"
        return TlsError(f"TLS: the segment store closed the connection right after the handshake: {why}", self.endpoint)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainers(None)

    # ---- state --------------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True until the connection failed or was closed."""
        return self._error is None and self._transport is not None

    @property
    def error(self) -> ConnectionLostError | None:
        """Why the connection is dead, or None while it is usable."""
        return self._error

    @property
    def load(self) -> int:
        """Pending requests plus registered append sessions (how busy the pool sees it)."""
        return len(self._pending) + len(self._writers)

    # ---- handshake and lifetime ---------------------------------------------------------------------------

    async def handshake(self) -> int:
        """Wait for the server's ``Hello`` and agree on a wire version; start the keep-alive timer.

        Raises ConnectionLostError if the connection fails first, IncompatibleVersionError (and closes) if
        the version ranges do not overlap.
        """
        hello = await self._hello
        try:
            self.wire_version = negotiate(hello)
        except ProtocolError:
            self.close()
            raise
        interval = self.config.keepalive_interval_ms
        if interval > 0 and self._keepalive is None:
            self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive(interval / 1000.0))
        return self.wire_version

    async def _keep_alive(self, interval_s: float) -> None:
        """Send ``KeepAlive`` every ``interval_s``; abort once nothing arrived for ``silent_peer_timeout_ms``
        (the server echoes each one, so a live server is never silent for two intervals)."""
        frame = encode(KeepAlive())
        timeout_ms = self.config.silent_peer_timeout_ms
        limit = -(-timeout_ms // self.config.keepalive_interval_ms) if timeout_ms else 0  # whole intervals
        silent = 0
        while self._error is None:
            await asyncio.sleep(interval_s)
            if self._heard:
                self._heard, silent = False, 0
            else:
                silent += 1
                if limit and silent >= limit:
                    self.abort(f"nothing from the segment store for {silent * interval_s:.1f}s (frozen or cut off)")
                    return
            if self._error is None and self._transport is not None:
                self._write(frame)

    def close(self) -> None:
        """Close now: pending requests fail with ConnectionLostError, sessions are told. Idempotent."""
        self._fail(ConnectionLostError("connection closed by the client", self.endpoint))

    def abort(self, reason: str) -> None:
        """Drop the connection at once (no flush of buffered writes), as after a broken reply stream."""
        self._fail(ConnectionLostError(reason, self.endpoint), abort=True)

    async def wait_closed(self) -> None:
        """Wait until the transport is closed (after :meth:`close` or a failure)."""
        if self._transport is None:
            return
        await asyncio.shield(self._closed)

    def _fail(self, error: ConnectionLostError, abort: bool = False) -> None:
        if self._error is not None:
            return
        self._error = error
        if self._keepalive is not None:
            self._keepalive.cancel()
        transport = self._transport
        if transport is not None:
            if abort:
                transport.abort()
            else:
                self._cork.flush()
                transport.close()
        self._cork.drop()
        if not self._hello.done():
            self._hello.set_exception(error)
            self._hello.exception()  # retrieved: nobody may be waiting for it
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        listeners = list({id(x): x for x in [*self._writers.values(), *self._routes.values()]}.values())
        self._writers.clear()
        self._routes.clear()
        self._wake_drainers(error)
        for listener in listeners:
            try:
                listener.on_connection_lost(self, error)
            except Exception:
                _log.exception("append session failed to handle the loss of %s", self.endpoint)
        if transport is None and not self._closed.done():
            self._closed.set_result(None)

    # ---- sending ------------------------------------------------------------------------------------------

    def _check_open(self) -> asyncio.Transport:
        if self._error is not None:
            raise self._error
        if self._transport is None:
            raise ConnectionLostError("connection is not established", self.endpoint)
        return self._transport

    def send(self, command: WireCommand) -> None:
        """Queue one command on the socket. Raises ConnectionLostError if the connection is dead."""
        self._check_open()
        self._write(encode(command))

    def send_frame(self, frame: bytes) -> None:
        """Queue already encoded frame bytes. Raises ConnectionLostError if the connection is dead."""
        self._check_open()
        self._write(frame)

    def send_frame_parts(self, head: bytes, parts: Sequence[bytes], tail: bytes, size: int) -> None:
        """Queue the frame ``head + b"".join(parts) + tail``, ``size`` bytes in all, given in pieces (joined
        only when the turn's frames leave). Raises ConnectionLostError if the connection is dead."""
        self._check_open()
        self._cork.write_parts(head, parts, tail, size)

    def _write(self, frame: bytes) -> None:
        self._cork.write(frame)

    def _send_out(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    async def drain(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark. Raises ConnectionLostError."""
        self._check_open()
        if not self._write_paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_drainers(self, error: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    async def request(self, command: WireCommand, expect: type[R], timeout_s: float | None = -1.0) -> R:
        """Send ``command`` (which has a ``request_id``) and return its reply, of type ``expect``.

        ``timeout_s``: -1 uses ``request_timeout_ms``; None waits for ever (tail reads). Raises the typed
        error of a failure reply (see ``errors``), UnexpectedReplyError for another reply,
        RequestTimeoutError, or ConnectionLostError.
        """
        request_id: int = getattr(command, "request_id")  # noqa: B009  (every request command has one)
        self._check_open()
        if request_id in self._pending:
            raise ValueError(f"request id {request_id} is already pending on this connection")
        future: asyncio.Future[WireCommand] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._write(encode(command))
            if timeout_s is not None and timeout_s < 0:
                timeout_s = self.config.request_timeout_ms / 1000.0
            if self._write_paused:
                await self.drain()
            try:
                async with asyncio.timeout(timeout_s):  # None: no limit
                    reply = await future
            except TimeoutError:
                raise RequestTimeoutError(
                    f"no reply to {type(command).__name__} (request {request_id}) within {timeout_s} s"
                ) from None
        finally:
            if self._pending.get(request_id) is future:
                del self._pending[request_id]
        if isinstance(reply, expect):
            return reply
        if is_failure_reply(reply):
            raise error_for_reply(reply)
        raise UnexpectedReplyError(type(command).__name__, reply)

    # ---- append sessions ----------------------------------------------------------------------------------

    def register_writer(self, writer_id: uuid.UUID, request_id: int, listener: ReplyListener) -> None:
        """Route replies for ``writer_id`` (and unclaimed replies with ``request_id``) to ``listener``.

        Raises ConnectionLostError if the connection is dead, ValueError if the writer id is taken.
        """
        self._check_open()
        key = writer_id.bytes
        existing = self._writers.get(key)
        if existing is not None and existing is not listener:
            raise ValueError(f"writer {writer_id} already has a session on this connection")
        self._writers[key] = listener
        self._routes[request_id] = listener

    def unregister_writer(self, writer_id: uuid.UUID, request_id: int, listener: ReplyListener) -> None:
        """Stop routing to ``listener`` (no-op for routes that now belong to another listener)."""
        key = writer_id.bytes
        if self._writers.get(key) is listener:
            del self._writers[key]
        if self._routes.get(request_id) is listener:
            del self._routes[request_id]

    # ---- dispatch -----------------------------------------------------------------------------------------

    def _dispatch(self, command: WireCommand) -> None:
        code = command.TYPE_CODE
        if code == _APPENDED_CODE:
            appended = cast(DataAppended, command)
            listener = self._writers.get(appended.writer_id.bytes)
            if listener is not None:
                listener.on_appended(self, appended.event_number, appended.current_segment_write_offset)
                return
        elif code in _WRITER_REPLIES:
            listener = self._writers.get(command.writer_id.bytes)  # type: ignore[attr-defined]
            if listener is not None:
                listener.on_reply(self, command)
                return
        elif code == _KEEPALIVE_CODE:
            return
        elif code == _HELLO_CODE:
            if not self._hello.done():
                self._hello.set_result(cast(Hello, command))
            return
        request_id = getattr(command, "request_id", None)
        if request_id is not None:
            future = self._pending.pop(request_id, None)
            if future is not None:
                if not future.done():
                    future.set_result(command)
                return
            route = self._routes.get(request_id)
            if route is not None:
                route.on_reply(self, command)
                return
        _log.debug("dropping reply nobody waits for from %s: %r", self.endpoint, command)


async def open_connection(endpoint: Endpoint, config: ConnectionConfig | None = None) -> Connection:
    """Connect to ``endpoint`` (with TLS if ``config.tls`` says so, checking the certificate names the endpoint's
    host) and exchange ``Hello``, within ``connect_timeout_ms`` or the time left of the call's budget
    (:mod:`segstore_shared.deadline`). Raises ConnectFailedError (retriable; a ConnectionLostError) when no
    connection could be opened, ConnectionLostError when it was lost during the ``Hello``; TlsError (not retriable)
    when the certificates do not fit; TlsConfigError when the trust store cannot be used."""
    config = config or ConnectionConfig()
    loop = asyncio.get_running_loop()
    context = config.tls.client_context() if config.tls is not None else None
    connection = Connection(endpoint, config)
    timeout_s = max(0.01, deadline.clip(config.connect_timeout_ms / 1000.0))  # never past the call's budget
    try:
        async with asyncio.timeout(timeout_s):
            if context is None:
                await loop.create_connection(lambda: connection, endpoint[0], endpoint[1])
            else:
                await loop.create_connection(
                    lambda: connection,
                    endpoint[0],
                    endpoint[1],
                    ssl=context,
                    server_hostname=endpoint[0],
                    ssl_handshake_timeout=timeout_s,
                )
            await connection.handshake()
    except ProtocolError:
        connection.close()
        raise
    except ConnectionLostError:
        connection.close()
        raise
    except (OSError, TimeoutError) as exc:
        connection.close()
        if config.tls is not None and isinstance(exc, ssl.SSLError | ConnectionResetError | BrokenPipeError):
            raise tls_failure(exc, endpoint, config.tls.describe()) from exc
        raise connect_failure(exc, endpoint) from exc
    return connection
