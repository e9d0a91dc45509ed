"""Conditional appends: data is appended only if the segment's length is the offset the caller expects.

One append is in flight at a time (each depends on the length the previous one left). A single event
goes as ``ConditionalAppend``, several as one ``ConditionalBlockEnd``; the server answers
``DataAppended`` (stored; its write offset is the new segment length) or ``ConditionalCheckFailed``
(nothing stored: :class:`~segment_store.client.errors.ConditionalCheckFailedError`). After a lost
connection the session sets up again: if ``AppendSetup`` reports the append's event number, it was
stored; otherwise it is sent again with the same condition, so it is applied at most once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from segment_store.client.config import WriterConfig
from segment_store.client.errors import ConditionalCheckFailedError, ConnectionLostError
from segment_store.client.session import AppendSession, ConnectionSource, SessionState
from segment_store.protocol import (
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    Event,
    WireCommand,
    encode_events,
)
from segment_store.protocol.types import Buffer


@dataclass(slots=True)
class _Conditional:
    event_number: int
    expected_offset: int
    payloads: Sequence[Buffer]
    data: bytes
    future: asyncio.Future[int]


class ConditionalWriter(AppendSession):
    """Conditional-append session for ``writer_id`` on ``segment``; make it with
    ``SegmentClient.conditional_writer``. ``close()`` leaves the connection."""

    def __init__(self, source: ConnectionSource, segment: str, writer_id: uuid.UUID, config: WriterConfig) -> None:
        super().__init__(source, segment, writer_id, config)
        self._lock = asyncio.Lock()
        self._next_event = 1
        self._current: _Conditional | None = None

    async def __aenter__(self) -> ConditionalWriter:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def append(self, payload: Buffer, expected_offset: int) -> int:
        """Append one event if the segment's length is ``expected_offset``; return the new length.

        Raises ConditionalCheckFailedError if the length differs (nothing was appended), or the
        session's error (SegmentIsSealedError, NoSuchSegmentError, ...).
        """
        return await self.append_many([payload], expected_offset)

    async def append_many(self, payloads: Sequence[Buffer], expected_offset: int) -> int:
        """Append several events atomically if the length is ``expected_offset``; return the new length."""
        if not payloads:
            raise ValueError("payloads: at least one event is needed")
        async with self._lock:
            self._check_usable()
            if self._state is SessionState.NEW:
                await self.open()
            data = encode_events(payloads)
            number = self._next_event + len(payloads) - 1
            self._next_event = number + 1
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._current = _Conditional(number, expected_offset, payloads, data, future)
            self._send()
            try:
                return await future
            finally:
                self._current = None

    async def close(self) -> None:
        """Leave the connection (waits for an append in progress). Idempotent."""
        async with self._lock:
            await self._shutdown()

    def _send(self) -> None:
        current, connection = self._current, self._connection
        if current is None or connection is None or self._state is not SessionState.CONNECTED:
            return
        command: WireCommand
        if len(current.payloads) == 1:
            event = Event(bytes(current.payloads[0]))
            command = ConditionalAppend(
                self.writer_id, current.event_number, current.expected_offset, event, self._request_id
            )
        else:
            command = ConditionalBlockEnd(
                self.writer_id, current.event_number, current.expected_offset, current.data, self._request_id
            )
        try:
            connection.send(command)
        except ConnectionLostError as error:
            self._detach(error)

    def _complete(self, offset: int) -> None:
        current = self._current
        if current is not None and not current.future.done():
            self._progress()
            current.future.set_result(offset if offset >= 0 else current.expected_offset + len(current.data))

    # ---- session hooks ------------------------------------------------------------------------------------

    def _on_setup(self, last_event_number: int) -> None:
        if self.setups == 1 and last_event_number >= self._next_event:
            self._next_event = last_event_number + 1
        current = self._current
        if current is not None and last_event_number >= current.event_number:
            self._complete(-1)
        else:
            self._send()

    def _on_detached(self) -> None:
        pass  # the current append, if any, is resent (or found stored) by the next setup

    def _on_appended(self, event_number: int, write_offset: int) -> None:
        current = self._current
        if current is not None and event_number >= current.event_number:
            self._complete(write_offset)

    def _on_session_reply(self, reply: WireCommand) -> bool:
        current = self._current
        if isinstance(reply, ConditionalCheckFailed):
            if current is not None and reply.event_number == current.event_number and not current.future.done():
                current.future.set_exception(ConditionalCheckFailedError(reply))
            return True
        return False

    def _holds_unacked(self) -> bool:
        current = self._current
        return current is not None and not current.future.done()

    def _on_failed(self, error: BaseException) -> None:
        current = self._current
        if current is not None and not current.future.done():
            current.future.set_exception(error)
