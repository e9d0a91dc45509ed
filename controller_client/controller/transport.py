"""The transport of :class:`~controller_client.controller.api.ControllerClient`: one ``grpc.aio`` channel, the
caller's credentials (a renewable ``Bearer`` token: :mod:`controller_client.controller.bearer`), and the call every
RPC goes through, with its deadline, UNAVAILABLE retries and error mapping (see ``controller.api``'s docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Self

import grpc
import grpc.aio

from controller_client.controller.bearer import BearerToken
from controller_client.controller.channel import (
    ControllerAddress,
    ControllerClientConfig,
    diagnose_tls,
    open_channel,
    parse_controller_address,
    status_error,
    unreachable_message,
)
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerError,
    ControllerFailureError,
    ControllerTlsError,
    ControllerUnavailableError,
    InvalidArgumentError,
)
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc
from segstore_shared import deadline
from segstore_shared.auth.tls import TrustConfig

ADMIN_SERVICE = "segstore.admin.v1.Admin"
ADMIN_PREFIX = "admin:"


class ControllerTransport:
    """One controller connection: its channel, credentials and the retrying call every RPC goes through."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        config: ControllerClientConfig | None = None,
        *,
        target: str = "",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        address: ControllerAddress | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """Use ``channel`` (the client owns it and closes it in :meth:`close`); ``address`` is where it leads.
        ``wall_clock`` (epoch s) decides when a ``config.token`` is renewed
        (:mod:`controller_client.controller.bearer`)."""
        self._channel = channel
        self._stub = pb_grpc.ControllerServiceStub(channel)
        self._config = config or ControllerClientConfig()
        self._metadata = self._config.call_metadata()
        token = self._config.token
        self._bearer = BearerToken(token, clock=wall_clock) if token is not None else None
        self._target = target or (address.target if address is not None else "controller")
        self._address = address
        self._sleep = sleep
        self._clock = clock

    @property
    def tls(self) -> TrustConfig | None:
        """The TLS trust of this client when its URI asked for TLS (segment stores are then reached with TLS
        and the same trust, as Pravega's clients do); None for plain text."""
        if self._address is None or not self._address.tls:
            return None
        return self._config.trust()

    @classmethod
    async def connect(cls, uri: str, config: ControllerClientConfig | None = None, *, wait_ready: bool = False) -> Self:
        """A client for the controller at ``uri`` (``tcp://host:port``, or ``tls://host:port`` for TLS with
        ``config.trust_store``). The channel connects lazily; with ``wait_ready`` this waits up to
        ``retry_timeout_s`` for a connection and raises :class:`ControllerUnavailableError` when there is
        none (:class:`ControllerTlsError` at once for a certificate problem). Raises InvalidArgumentError
        for a bad URI, TlsConfigError for a trust store or client certificate that cannot be used."""
        config = config or ControllerClientConfig()
        address = parse_controller_address(uri)
        client = cls(open_channel(address, config), config, address=address)
        if wait_ready:
            try:
                await client._wait_ready()
            except BaseException:
                await client.close()
                raise
        return client

    @property
    def unreachable_timeout_s(self) -> float:
        """The budget for "unreachable" (``config.retry_timeout_s``), which a ``StreamManager`` on this client
        gives its calls too."""
        return self._config.retry_timeout_s

    async def _wait_ready(self) -> None:
        """One RPC, retried as every call: a certificate problem is told apart from a controller that is down, and
        an unreachable one fails with the same message as any call."""
        with contextlib.suppress(ControllerFailureError, InvalidArgumentError):  # it answered: it is there
            await self._call("getControllerServerList", pb.ServerRequest())

    async def close(self) -> None:
        """Close the channel; RPCs in flight are cancelled. Idempotent."""
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- transport ------------------------------------------------------------------------------------------
    async def _call(self, rpc: str, request: Any, *, not_found: ControllerError | None = None) -> Any:
        """Invoke ``rpc`` with deadline and UNAVAILABLE retries; map gRPC errors to typed ones.

        ``not_found`` is raised for gRPC NOT_FOUND (a Pravega controller answers that way when the
        stream of a read-only query does not exist). A renewable ``config.token`` is renewed first when it is
        about to expire, and once more if the controller says it has expired (clocks differ)."""
        bearer = self._bearer
        if bearer is None:
            return await self._attempts(rpc, request, self._metadata, not_found)
        await bearer.renew_if_due(self._exchange)
        shown = bearer.token
        try:
            return await self._attempts(rpc, request, bearer.metadata(), not_found)
        except ControllerAuthenticationError as error:
            if not bearer.renewable or "expired" not in str(error):
                raise
        await bearer.renew(self._exchange, shown)
        return await self._attempts(rpc, request, bearer.metadata(), not_found)

    async def admin_call(
        self, method: str, request: dict[str, Any], *, not_found: ControllerError | None = None
    ) -> Any:
        """A call of segstore's admin extension of the controller (``controller.rpc.admin``, service
        ``segstore.admin.v1.Admin``): a JSON object in, a JSON value out; retries, credentials and errors as every
        RPC. A Pravega controller answers UNIMPLEMENTED (``ControllerFailureError``)."""
        return await self._call(ADMIN_PREFIX + method, request, not_found=not_found)

    def _admin_method(self, rpc: str) -> Any:
        if not rpc.startswith(ADMIN_PREFIX):
            raise AttributeError(f"the controller has no RPC {rpc!r}")
        return self._channel.unary_unary(
            f"/{ADMIN_SERVICE}/{rpc[len(ADMIN_PREFIX) :]}",
            request_serializer=lambda value: json.dumps(value).encode(),
            response_deserializer=json.loads,
        )

    async def _exchange(self, request: pb.StreamInfo, metadata: Iterable[tuple[str, str]]) -> str:
        resp: pb.DelegationToken = await self._attempts("getDelegationToken", request, metadata, None)
        return resp.delegationToken

    async def _attempts(
        self, rpc: str, request: Any, metadata: Iterable[tuple[str, str]] | None, not_found: ControllerError | None
    ) -> Any:
        config = self._config
        started = self._clock()
        outer = deadline.current()  # the caller's budget, which may end sooner than this client's
        limit_s = config.retry_timeout_s if outer is None else min(config.retry_timeout_s, outer.remaining_s())
        with deadline.budget(config.retry_timeout_s) as budget:
            give_up_at = started + limit_s
            backoff = config.initial_backoff_s
            looked_at_tls = False
            method = getattr(self._stub, rpc, None) or self._admin_method(rpc)
            while True:
                try:
                    return await method(request, timeout=config.rpc_timeout_s, metadata=metadata)
                except grpc.aio.AioRpcError as e:
                    code = e.code()
                    if code != grpc.StatusCode.UNAVAILABLE:
                        raise status_error(rpc, e, self._target, config.rpc_timeout_s, not_found) from e
                    details = e.details() or ""
                    if not looked_at_tls and self._address is not None and self._address.tls:
                        looked_at_tls = True  # once per call: a certificate problem is not retried
                        problem = await diagnose_tls(details, self._address, config)
                        if problem is not None:
                            raise ControllerTlsError(f"{rpc}: TLS to controller {self._target}: {problem}") from e
                    remaining = give_up_at - self._clock()
                    if remaining <= 0:
                        elapsed = max(self._clock() - started, budget.elapsed_s())
                        message = await unreachable_message(self._address, self._target, elapsed, details)
                        raise deadline.mark_final(ControllerUnavailableError(message)) from e
                except grpc.aio.UsageError as e:
                    raise ControllerError(f"{rpc}: client is closed") from e
                await self._sleep(min(backoff, remaining))
                backoff = min(backoff * config.backoff_multiplier, config.max_backoff_s)
