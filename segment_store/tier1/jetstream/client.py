"""The JetStream calls the JetStream Tier-1 log makes, over one NATS connection (nats-py).

One :class:`JetStreamClient` per segment store process, shared by its container logs. It
hides nats-py's shapes and turns failures into three kinds the log maps to its own errors:

- :class:`JetStreamUnavailableError`: no connection, no answer in time, no stream leader
  (NATS down, the stream's quorum lost, an election under way): retriable;
- :class:`StreamMissingError`: the stream does not exist;
- :class:`JetStreamRequestError`: JetStream answered with an error (bad configuration,
  wrong last sequence...), with its ``code`` and ``err_code``.

Appends do not go through here one by one: the log publishes with :meth:`publish` and
reads the acknowledgements from its own reply subscription (nats-py's ``publish_async``
never completes when the server answers with an error).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

from segment_store.tier1.jetstream.config import redacted
from segstore_shared.errors import SegstoreError

_log = logging.getLogger(__name__)
DIRECT_GET = "$JS.API.DIRECT.GET."
STATUS = "Status"
ERR_STREAM_NAME_IN_USE = 10058
ERR_WRONG_LAST_SEQUENCE = 10071


class JetStreamError(SegstoreError):
    """Base of this module's errors."""


class JetStreamUnavailableError(JetStreamError):
    """NATS or the stream cannot serve the request now (retriable)."""


class StreamMissingError(JetStreamError):
    """The stream does not exist."""


class JetStreamRequestError(JetStreamError):
    """JetStream answered a request with an error."""

    def __init__(self, description: str, code: int = 0, err_code: int = 0) -> None:
        super().__init__(f"{description} (code {code}, err_code {err_code})")
        self.description = description
        self.code = code
        self.err_code = err_code


_LOGIN_REFUSED = re.compile(r"Authorization Violation|Authentication (Timeout|Expired)|authentication expired", re.I)
"""How NATS answers a login it refuses (wrong or missing credentials, an expired JWT)."""

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.NoServersError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    asyncio.TimeoutError,
    OSError,
)


@dataclass(frozen=True, slots=True)
class StreamState:
    first_seq: int
    last_seq: int
    messages: int
    replicas: int


@dataclass(frozen=True, slots=True)
class StoredMessage:
    sequence: int
    headers: dict[str, str] | None
    data: bytes


def parse_ack(data: bytes) -> int:
    """The stream sequence of a publish acknowledgement; raises :class:`JetStreamRequestError` for an error."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise JetStreamRequestError(f"unreadable JetStream answer {data[:200]!r}") from exc
    error = document.get("error")
    if error is not None:
        raise JetStreamRequestError(
            str(error.get("description", error)), int(error.get("code", 0)), int(error.get("err_code", 0))
        )
    return int(document["seq"])


class JetStreamClient:
    """One NATS connection and the JetStream calls of the Tier-1 logs (see module docstring)."""

    def __init__(self, connection: Client, request_timeout_s: float, closing: list[bool] | None = None) -> None:
        self._nc = connection
        self._jsm = connection.jsm(timeout=request_timeout_s)
        self._timeout = request_timeout_s
        self._closing = closing if closing is not None else [False]  # shared with the connection's callbacks

    @classmethod
    async def connect(cls, servers: tuple[str, ...], *, timeout_s: float, request_timeout_s: float,
                      name: str = "segstore-tier1", tls_ca: str | None = None,
                      creds: str | None = None) -> JetStreamClient:  # fmt: skip
        """Connect to any of ``servers`` (reconnecting forever after); raises :class:`JetStreamUnavailableError`,
        whose message names the servers (passwords hidden) and the last error a server gave (a refused login:
        ``Authorization Violation``). With ``tls://`` URLs or ``tls_ca`` the connection is TLS, the servers'
        certificates checked against ``tls_ca`` (None: the system's trust store) and the host name of the URL.
        ``creds``: a NATS credentials file to log in with (else the URLs' ``user:password@``, if any)."""
        tls = (
            ssl.create_default_context(cafile=tls_ca)
            if tls_ca or any(s.startswith("tls://") for s in servers)
            else None
        )

        closing = [False]

        async def disconnected() -> None:
            if not closing[0]:
                _log.warning("NATS connection lost; reconnecting")

        async def reconnected() -> None:
            _log.info("NATS connection back")

        last_error: list[str] = []
        refused: list[str] = []
        connecting = asyncio.current_task()

        async def error(exc: Exception) -> None:
            last_error[:] = [str(exc) or repr(exc)]
            _log.warning("NATS connection error: %s", exc)
            if not refused and connecting is not None and _LOGIN_REFUSED.search(last_error[0]):
                refused.append(last_error[0])  # never better on the next try: stop trying at once
                connecting.cancel()

        where = ",".join(redacted(s) for s in servers)
        options: dict[str, Any] = {  # nats-py's annotations say int where it takes seconds as float
            "servers": list(servers),
            "name": name,
            "connect_timeout": min(2.0, timeout_s),
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "disconnected_cb": disconnected,
            "reconnected_cb": reconnected,
            "error_cb": error,
            "tls": tls,
            "user_credentials": creds,
        }
        connection = Client()
        try:
            async with asyncio.timeout(timeout_s):
                await connection.connect(**options)
        except asyncio.CancelledError:
            if not refused or connecting is None:
                raise
            connecting.uncancel()
            closing[0] = True
            await connection.close()
            raise JetStreamUnavailableError(f"NATS at {where} refused the login: {refused[0]}") from None
        except _UNAVAILABLE as exc:
            closing[0] = True
            await connection.close()
            cause = f"last error: {last_error[0]}" if last_error else repr(exc)
            raise JetStreamUnavailableError(f"cannot connect to NATS at {where} in {timeout_s:g} s: {cause}") from exc
        return cls(connection, request_timeout_s, closing)

    @property
    def max_payload(self) -> int:
        """The largest message (headers included) the connected server accepts."""
        return int(self._nc.max_payload)

    @property
    def connected_url(self) -> str:
        url = self._nc.connected_url
        return f"{url.scheme}://{url.netloc}" if url is not None else "<not connected>"

    def new_inbox(self) -> str:
        return self._nc.new_inbox()

    async def subscribe(self, subject: str, callback: Callable[[Msg], Awaitable[None]]) -> Subscription:
        return await self._nc.subscribe(subject, cb=callback)

    async def publish(self, subject: str, payload: bytes, reply: str, headers: dict[str, str]) -> None:
        """Hand one message to the connection (no wait for the server); raises :class:`JetStreamUnavailableError`."""
        try:
            await self._nc.publish(subject, payload, reply=reply, headers=headers)
        except _UNAVAILABLE as exc:
            raise JetStreamUnavailableError(f"publish to {subject} failed: {exc!r}") from exc

    async def publish_and_wait(self, subject: str, payload: bytes, headers: dict[str, str]) -> int:
        """Publish and wait for JetStream's acknowledgement; the stream sequence the message got."""
        try:
            answer = await self._nc.request(subject, payload, timeout=self._timeout, headers=headers)
        except _UNAVAILABLE as exc:
            raise JetStreamUnavailableError(f"publish to {subject} got no acknowledgement: {exc!r}") from exc
        return parse_ack(answer.data)

    async def create_stream(self, config: api.StreamConfig) -> None:
        """Create the stream; an existing one with the same configuration is fine."""
        try:
            await self._jsm.add_stream(config)
        except _UNAVAILABLE as exc:
            raise JetStreamUnavailableError(f"creating stream {config.name}: {exc!r}") from exc
        except nats.js.errors.APIError as exc:
            raise JetStreamRequestError(str(exc.description), exc.code or 0, exc.err_code or 0) from exc

    async def stream_state(self, name: str) -> StreamState:
        """The stream's first and last sequence (from its leader); raises :class:`StreamMissingError`."""
        try:
            info = await self._jsm.stream_info(name)
        except nats.js.errors.NotFoundError as exc:
            raise StreamMissingError(f"JetStream stream {name} does not exist") from exc
        except _UNAVAILABLE as exc:
            raise JetStreamUnavailableError(f"stream {name} info: {exc!r}") from exc
        except nats.js.errors.APIError as exc:
            raise JetStreamRequestError(str(exc.description), exc.code or 0, exc.err_code or 0) from exc
        state = info.state
        return StreamState(
            first_seq=int(state.first_seq),
            last_seq=int(state.last_seq),
            messages=int(state.messages),
            replicas=int(info.config.num_replicas or 1),
        )

    async def purge_below(self, name: str, keep_from: int) -> None:
        """Delete every message with a sequence below ``keep_from`` (>= 2)."""
        try:
            await self._jsm.purge_stream(name, seq=keep_from)
        except nats.js.errors.NotFoundError as exc:
            raise StreamMissingError(f"JetStream stream {name} does not exist") from exc
        except _UNAVAILABLE as exc:
            raise JetStreamUnavailableError(f"purging stream {name}: {exc!r}") from exc
        except nats.js.errors.APIError as exc:
            raise JetStreamRequestError(str(exc.description), exc.code or 0, exc.err_code or 0) from exc

    async def read_range(self, name: str, first: int, last: int, max_bytes: int) -> list[StoredMessage]:
        """Messages from sequence ``first`` on, at most up to ``last`` and about ``max_bytes`` (at least one when
        any is there), in order. Any replica may answer, so a follower behind the leader may return fewer (even
        none); the caller asks again from where it stands."""
        inbox = self._nc.new_inbox()
        messages: list[StoredMessage] = []
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def on_message(msg: Msg) -> None:
            headers = msg.headers
            status = headers.get(STATUS) if headers else None
            if status is None:
                sequence = int(headers["Nats-Sequence"]) if headers and "Nats-Sequence" in headers else -1
                messages.append(StoredMessage(sequence, headers, msg.data))
                return
            if not done.done():
                if status in ("204", "404"):  # end of batch / nothing at or after ``first``
                    done.set_result(None)
                elif status == "503":  # no responders: the stream has no replica serving now
                    done.set_exception(JetStreamUnavailableError(f"direct get on {name}: no replica answers"))
                else:
                    description = headers.get("Description", "") if headers else ""
                    done.set_exception(JetStreamRequestError(f"direct get on {name}: {status} {description}"))

        request = json.dumps({"seq": first, "batch": last - first + 1, "up_to_seq": last, "max_bytes": max_bytes})
        try:
            subscription = await self._nc.subscribe(inbox, cb=on_message)
            try:
                await self._nc.publish(DIRECT_GET + name, request.encode(), reply=inbox)
                async with asyncio.timeout(self._timeout):
                    await done
            finally:
                await subscription.unsubscribe()
        except _UNAVAILABLE as exc:
            raise JetStreamUnavailableError(f"reading stream {name} from {first}: {exc!r}") from exc
        return messages

    async def close(self) -> None:
        self._closing[0] = True
        try:
            await self._nc.close()
        except _UNAVAILABLE as exc:
            _log.debug("closing the NATS connection: %r", exc)
