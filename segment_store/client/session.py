"""The append session life cycle shared by the plain and the conditional writer.

A session is one writer id on one segment. It sends ``SetupAppend`` on a pooled connection and learns
from ``AppendSetup`` the last event number the segment stored for that writer; from then on the
connection routes the writer's acks and failures to it (``ReplyListener``). When the connection is lost,
or the server answers ``WrongHost`` or ``InvalidEventNumber`` (a deduplication race after a reconnect),
the session detaches and sets up again with backoff (``WriterConfig.retry``: the first reconnect without an
acknowledgement since the last one at once, each further one after the policy's pause for that attempt), on a
new connection if the old one died; the subclass then drops what the server says it has and resends the rest in
order.
A failure that repeating cannot fix (``SegmentIsSealed``, ``NoSuchSegment``, a rejected token, an
exhausted retry budget) fails the session for good: :attr:`AppendSession.failure` holds the error and
every pending write fails with it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from typing import Protocol

from segment_store.client.config import WriterConfig
from segment_store.client.connection import Connection, next_request_id
from segment_store.client.errors import (
    AuthTokenCheckFailedError,
    ClientClosedError,
    ConnectionLostError,
    InvalidEventNumberError,
    ReplyError,
    SegmentIsSealedError,
    WrongHostError,
    error_for_reply,
    is_failure_reply,
)
from segment_store.client.retry import is_retriable
from segment_store.protocol import AppendSetup, DataAppended, SetupAppend, WireCommand

_log = logging.getLogger(__name__)


class ConnectionSource(Protocol):
    """Where sessions and readers get connections (``SegmentClient`` is one)."""

    async def token(self, segment: str, write: bool) -> str: ...

    def token_expired(self, segment: str) -> None: ...

    def moved(self, segment: str) -> None: ...

    async def connection_for(self, segment: str) -> Connection: ...


class SessionState(enum.Enum):
    NEW = "new"
    SETTING_UP = "setting up"
    CONNECTED = "connected"
    FAILED = "failed"
    CLOSED = "closed"


class AppendSession:
    """Base of :class:`~segment_store.client.writer.SegmentWriter` and
    :class:`~segment_store.client.conditional.ConditionalWriter`: setup, routing, reconnect, failure.

    Subclasses implement :meth:`_on_setup`, :meth:`_on_detached`, :meth:`_on_appended`,
    :meth:`_on_session_reply`, :meth:`_on_failed` and :meth:`_holds_unacked`. Use from the event loop that opened it.
    """

    def __init__(self, source: ConnectionSource, segment: str, writer_id: uuid.UUID, config: WriterConfig) -> None:
        self.segment = segment
        self.writer_id = writer_id
        self.config = config
        self._source = source
        self._state = SessionState.NEW
        self._connection: Connection | None = None
        self._request_id = -1
        self._failure: BaseException | None = None
        self._setup_task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._reconnects_without_progress = 0
        self.setups = 0
        """How many times ``SetupAppend`` succeeded (1 + reconnects); for tests and metrics."""
        self.wrong_hosts = 0
        """How many ``WrongHost`` replies (to a setup or to appends) the session followed by asking its
        connection source for the segment's host again; for tests and metrics."""
        self.server_last_event_number: int | None = None
        """What the latest ``AppendSetup`` said the segment holds for this writer id."""

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def failure(self) -> BaseException | None:
        """The error that ended the session, or None."""
        return self._failure

    @property
    def connection(self) -> Connection | None:
        """The connection the session is set up on (None while reconnecting)."""
        return self._connection

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._state is SessionState.CLOSED:
            raise ClientClosedError(f"writer {self.writer_id} on {self.segment} is closed")

    async def open(self) -> int:
        """Set the session up (retrying as configured); returns the last event number the segment stored
        for this writer id (negative if none). Raises the setup's typed error if it cannot be fixed."""
        self._check_usable()
        if self._state is SessionState.NEW:
            self._state = SessionState.SETTING_UP
            self._setup_task = asyncio.get_running_loop().create_task(self._setup_with_retry())
        await self._wait_connected()
        assert self.server_last_event_number is not None
        return self.server_last_event_number

    async def _wait_connected(self) -> None:
        while self._state is not SessionState.CONNECTED:
            self._check_usable()
            await self._connected.wait()
        self._check_usable()

    # ---- setup and reconnect ------------------------------------------------------------------------------

    async def _setup_once(self) -> None:
        if self._state is not SessionState.SETTING_UP:
            return
        connection = await self._source.connection_for(self.segment)
        request_id = next_request_id()
        connection.register_writer(self.writer_id, request_id, self)
        try:
            token = await self._source.token(self.segment, True)
            command = SetupAppend(request_id, self.writer_id, self.segment, token)
            reply = await connection.request(command, AppendSetup)
        except BaseException as error:
            connection.unregister_writer(self.writer_id, request_id, self)
            if isinstance(error, WrongHostError):
                self.wrong_hosts += 1
                self._source.moved(self.segment)  # the reconnect asks for the segment's owner again
            if isinstance(error, AuthTokenCheckFailedError) and error.retriable:
                self._source.token_expired(self.segment)  # the reconnect asks for a new one
            raise
        if self._state is not SessionState.SETTING_UP:
            connection.unregister_writer(self.writer_id, request_id, self)
            return
        self._connection = connection
        self._request_id = request_id
        self._state = SessionState.CONNECTED
        self.setups += 1
        self.server_last_event_number = reply.last_event_number
        self._connected.set()
        _log.debug("writer %s set up on %s, last event %d", self.writer_id, self.segment, reply.last_event_number)
        self._on_setup(reply.last_event_number)

    async def _setup_with_retry(self, pause_s: float = 0.0) -> None:
        try:
            if pause_s > 0:
                await self.config.retry.sleep(pause_s)
                if self._state is not SessionState.SETTING_UP:
                    return  # closed or failed meanwhile
            await self.config.retry.call(self._setup_once, self._setup_retriable)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self._state is SessionState.SETTING_UP:
                self._fail(error)

    @staticmethod
    def _setup_retriable(error: BaseException) -> bool:
        return is_retriable(error) or isinstance(error, InvalidEventNumberError)

    def _detach(self, cause: BaseException) -> None:
        """Leave the current connection and set up again (new connection if that one died)."""
        connection = self._connection
        if connection is not None:
            connection.unregister_writer(self.writer_id, self._request_id, self)
        self._connection = None
        if self._state is not SessionState.CONNECTED:
            return
        self._reconnects_without_progress += 1
        self._state = SessionState.SETTING_UP
        self._connected.clear()
        self._on_detached()
        if self._reconnects_without_progress > self.config.retry.max_attempts:
            self._fail(cause)
            return
        # The first reconnect without progress goes at once (a lost server: fail over fast); each further one waits
        # the retry policy's backoff, so the budget spans seconds, not a burst: a server that accepts the setup and
        # then refuses the resent appends (InvalidEventNumber while appends of the previous connection are still
        # in flight) would otherwise use it up in a fraction of a second and fail the writer.
        pause = self.config.retry.delay_s(self._reconnects_without_progress)
        _log.info("writer %s on %s reconnects after %r", self.writer_id, self.segment, cause)
        self._setup_task = asyncio.get_running_loop().create_task(self._setup_with_retry(pause))

    def _progress(self) -> None:
        """The server acknowledged something: reset the budget of reconnects without progress."""
        self._reconnects_without_progress = 0

    def _fail(self, error: BaseException) -> None:
        if self._state in (SessionState.FAILED, SessionState.CLOSED):
            return
        connection = self._connection
        if connection is not None:
            connection.unregister_writer(self.writer_id, self._request_id, self)
        self._connection = None
        self._state = SessionState.FAILED
        self._failure = error
        self._connected.set()  # wake waiters; they see the failure
        if isinstance(error, ClientClosedError) and not self._holds_unacked():
            # The client was closed under a session with nothing outstanding (e.g. a manager closed before
            # its writers): nothing is lost, so this is no warning; one per segment would drown the log.
            _log.debug("writer %s on %s ends with its closed client", self.writer_id, self.segment)
        elif isinstance(error, SegmentIsSealedError):
            # A segment's normal end: an event writer follows the scale (and says so), a transaction is merged;
            # the owner gets the error with every pending write and decides whether it is a failure.
            _log.debug("writer %s on %s ends: the segment is sealed", self.writer_id, self.segment)
        else:
            _log.warning("writer %s on %s failed: %r", self.writer_id, self.segment, error)
        self._on_failed(error)

    async def _shutdown(self) -> None:
        """Leave the connection and stop any reconnect (the subclass flushed what it had to)."""
        task = self._setup_task
        if task is not None and not task.done():
            task.cancel()
        connection = self._connection
        if connection is not None:
            connection.unregister_writer(self.writer_id, self._request_id, self)
        self._connection = None
        if self._state is not SessionState.FAILED:
            self._state = SessionState.CLOSED
        self._connected.set()

    # ---- ReplyListener ------------------------------------------------------------------------------------

    def on_connection_lost(self, connection: Connection, error: ConnectionLostError) -> None:
        if connection is self._connection:
            self._detach(error)

    def on_appended(self, connection: Connection, event_number: int, write_offset: int) -> None:
        if connection is self._connection:
            self._on_appended(event_number, write_offset)

    def on_reply(self, connection: Connection, reply: WireCommand) -> None:
        if connection is not self._connection:
            return
        if isinstance(reply, DataAppended):  # (routed by request id: the connection sends acks to on_appended)
            self._on_appended(reply.event_number, reply.current_segment_write_offset)
            return
        if self._on_session_reply(reply):
            return
        if not is_failure_reply(reply):
            _log.warning("writer %s on %s ignores unexpected %r", self.writer_id, self.segment, reply)
            return
        error: ReplyError = error_for_reply(reply)
        if isinstance(error, WrongHostError):
            self.wrong_hosts += 1
            self._source.moved(self.segment)
        if isinstance(error, WrongHostError | InvalidEventNumberError) or error.retriable:
            self._detach(error)
        else:
            self._fail(error)

    # ---- subclass hooks -----------------------------------------------------------------------------------

    def _on_setup(self, last_event_number: int) -> None:
        """Connected: drop what the server has up to ``last_event_number`` and (re)send the rest."""
        raise NotImplementedError

    def _on_detached(self) -> None:
        """The connection is gone: whatever was sent and not acknowledged must be sent again."""
        raise NotImplementedError

    def _on_appended(self, event_number: int, write_offset: int) -> None:
        """``DataAppended``: events up to ``event_number`` are stored; the segment is ``write_offset`` long."""
        raise NotImplementedError

    def _on_session_reply(self, reply: WireCommand) -> bool:
        """Handle the subclass's own replies (conditional failures); return False to let the base handle
        failures."""
        raise NotImplementedError

    def _on_failed(self, error: BaseException) -> None:
        """The session is over: fail every pending write with ``error``."""
        raise NotImplementedError

    def _holds_unacked(self) -> bool:
        """Whether the session holds writes the server has not acknowledged (a failure now loses them)."""
        raise NotImplementedError
