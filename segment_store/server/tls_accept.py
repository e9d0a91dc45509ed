"""TLS on the wire server's port: each accepted connection does the TLS handshake first, then gets its protocol.

The port speaks TLS from the first byte, as Pravega's segment store does with TLS on (no STARTTLS, no
plain-text fallback). asyncio's ``create_server(ssl=...)`` would do the handshake too, but it drops a
failed one without a word and never tells the protocol it made for it; here the server accepts plain TCP
and upgrades each connection with ``loop.start_tls``, so that:

- a failed handshake (a plain-text client, a client that does not trust our certificate, a client without
  the certificate ``--tls-ca`` requires, a handshake slower than ``tls_handshake_timeout_s``) closes that
  connection only and is logged as one line naming the peer and the reason; other connections go on;
- the connection's protocol (:class:`~segment_store.server.connection.ServerConnection`) is made only
  after a successful handshake, so it never counts a connection that never was;
- handshakes in progress count against ``max_connections`` and end with :meth:`TlsHandshake.abort`.

Ordering: the socket is not read until the TLS layer is in place (the accepted transport is paused at
once), and whatever arrives between the end of the handshake and the hand-over reaches the connection's
protocol in order, after its ``connection_made``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import cast

log = logging.getLogger(__name__)


def describe_handshake_failure(error: BaseException) -> str:
    """A short reason for a failed handshake, with a hint for the usual causes."""
    if isinstance(error, ssl.SSLError):
        reason = (error.reason or "").upper()
        text = f"{error.reason or type(error).__name__}: {error.strerror or error}"
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL", "RECORD_LAYER_FAILURE"):
            return f"{text} (not a TLS client hello: a plain-text client? it must connect with TLS)"
        if "CERTIFICATE" in reason and ("NO_" in reason or "NOT_RETURN" in reason or "REQUIRED" in reason):
            return f"{text} (the client sent no certificate; this server requires one signed by --tls-ca)"
        if "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason or "CERTIFICATE_UNKNOWN" in reason:
            return f"{text} (the client does not trust this server's certificate, or ours not its)"
        return text
    if isinstance(error, ConnectionAbortedError):
        return str(error) or "handshake aborted"
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return "the peer closed the connection during the handshake"
    return f"{type(error).__name__}: {error}"


class _Gate(asyncio.Protocol):
    """The TLS transport's protocol from the end of the handshake to the hand-over: keeps what arrives."""

    def __init__(self) -> None:
        self._target: asyncio.Protocol | None = None
        self._data: list[bytes] = []
        self._eof = False
        self._lost: tuple[Exception | None] | None = None
        self._write_paused = False

    def data_received(self, data: bytes) -> None:
        if self._target is not None:
            self._target.data_received(data)
        else:
            self._data.append(bytes(data))

    def eof_received(self) -> bool | None:
        if self._target is not None:
            return self._target.eof_received()
        self._eof = True
        return True  # keep the transport; the connection's protocol decides once it has it

    def connection_lost(self, exc: Exception | None) -> None:
        if self._target is not None:
            self._target.connection_lost(exc)
        else:
            self._lost = (exc,)

    def pause_writing(self) -> None:
        if self._target is not None:
            self._target.pause_writing()
        self._write_paused = True

    def resume_writing(self) -> None:
        if self._target is not None:
            self._target.resume_writing()
        self._write_paused = False

    def hand_over(self, transport: asyncio.Transport, protocol: asyncio.Protocol) -> None:
        """Make ``protocol`` the transport's protocol and replay what arrived meanwhile, in order."""
        transport.set_protocol(protocol)
        self._target = protocol  # late callbacks already scheduled for the gate go to the protocol
        protocol.connection_made(transport)
        if self._write_paused:
            protocol.pause_writing()
        data, self._data = self._data, []
        for chunk in data:
            if transport.is_closing():
                break
            protocol.data_received(chunk)
        if self._eof and not transport.is_closing() and not protocol.eof_received():
            transport.close()
        if self._lost is not None:
            protocol.connection_lost(self._lost[0])


class TlsHandshake(asyncio.Protocol):
    """The protocol of an accepted TCP connection until its TLS handshake ends (module docstring).

    ``open_protocol`` makes the connection's protocol once the handshake succeeded; ``on_done`` is called
    once, when the handshake ended either way (the server stops counting it).
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        timeout_s: float,
        open_protocol: Callable[[], asyncio.Protocol],
        on_done: Callable[[TlsHandshake], None],
    ) -> None:
        self._context = context
        self._timeout_s = timeout_s
        self._open_protocol = open_protocol
        self._on_done = on_done
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        transport.pause_reading()  # not one byte may be read before the TLS layer is in place
        self._transport = transport
        self.peer = str(transport.get_extra_info("peername"))
        self._task = asyncio.get_running_loop().create_task(self._upgrade(transport), name=f"tls-accept {self.peer}")

    def data_received(self, data: bytes) -> None:  # never: reading is paused until start_tls takes over
        log.error("connection %s: %d bytes before the TLS handshake; closing", self.peer, len(data))
        self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        # the socket closed before start_tls took it over (afterwards the TLS layer is its protocol)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def abort(self) -> None:
        """End the handshake now (server stop); the socket is closed."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._transport is not None:
            self._transport.abort()

    async def _upgrade(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        gate = _Gate()
        try:
            tls = await loop.start_tls(
                transport, gate, self._context, server_side=True, ssl_handshake_timeout=self._timeout_s
            )
        except asyncio.CancelledError:
            transport.abort()
            self._on_done(self)
            raise
        except (OSError, ValueError, TimeoutError) as error:  # ssl.SSLError is an OSError
            log.warning("connection %s: TLS handshake failed, closed: %s", self.peer, describe_handshake_failure(error))
            transport.abort()
            self._on_done(self)
            return
        self._on_done(self)
        if tls is None or tls.is_closing():  # the peer went away as the handshake ended
            transport.abort()
            return
        gate.hand_over(tls, self._open_protocol())
