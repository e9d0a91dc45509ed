"""The transport of :class:`~controller_client.controller.api.ControllerClient`: one ``grpc.aio`` channel per
controller of the URI, the caller's credentials (a renewable ``Bearer`` token:
:mod:`controller_client.controller.bearer`), and the call every RPC goes through, with its deadline, UNAVAILABLE
retries, failover and error mapping (see ``controller.api``'s docstring).

Failover: every controller of a segstore cluster answers every RPC (their state is in ZooKeeper; the buckets only
split the periodic work, ``docs/cluster.md``), so nothing is forwarded. A call goes to the *current* controller
(the first of the list at start, then the one that answered last); an attempt that fails with UNAVAILABLE moves
the call to the next controller of the list at once, round robin, and only after a whole round of failures does
it back off (exponentially, as with one controller). All of it within the one budget of the call
(``retry_timeout_s``, :mod:`segstore_shared.deadline`). A controller that answered and then missed the deadline
(DEADLINE_EXCEEDED) may have acted: that call fails at once as before, and the next call starts at the next
controller. A controller whose TLS certificates do not fit is left out for the rest of the call. The controller
that answers becomes the current one for the calls after it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import grpc
import grpc.aio

from controller_client.controller.bearer import BearerToken
from controller_client.controller.channel import (
    ControllerAddress,
    ControllerClientConfig,
    ControllerList,
    diagnose_tls,
    open_channel,
    parse_controllers,
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


@dataclass(frozen=True, slots=True)
class _Endpoint:
    """One controller: its channel, its stub and where it leads (``address`` None: a channel given as is)."""

    channel: grpc.aio.Channel
    stub: pb_grpc.ControllerServiceStub
    address: ControllerAddress | None
    target: str

    def method(self, rpc: str) -> Any:
        found = getattr(self.stub, rpc, None)
        if found is not None:
            return found
        if not rpc.startswith(ADMIN_PREFIX):
            raise AttributeError(f"the controller has no RPC {rpc!r}")
        return self.channel.unary_unary(
            f"/{ADMIN_SERVICE}/{rpc[len(ADMIN_PREFIX) :]}",
            request_serializer=lambda value: json.dumps(value).encode(),
            response_deserializer=json.loads,
        )


class ControllerTransport:
    """The controllers of one URI: their channels, credentials and the retrying call every RPC goes through."""

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
        fallbacks: Sequence[tuple[grpc.aio.Channel, ControllerAddress]] = (),
    ) -> None:
        """Use ``channel`` (the client owns it and closes it in :meth:`close`); ``address`` is where it leads.
        ``fallbacks``: the channels to the other controllers of the URI, in the order they are tried after
        ``channel`` (module docstring); closed with it. ``wall_clock`` (epoch s) decides when a ``config.token``
        is renewed (:mod:`controller_client.controller.bearer`)."""
        first = _Endpoint(
            channel,
            pb_grpc.ControllerServiceStub(channel),
            address,
            target or (address.target if address is not None else "controller"),
        )
        others = [_Endpoint(c, pb_grpc.ControllerServiceStub(c), a, a.target) for c, a in fallbacks]
        self._endpoints = [first, *others]
        addresses = [e.address for e in self._endpoints]
        self._controllers = (
            ControllerList(tuple(a for a in addresses if a is not None)) if None not in addresses else None
        )
        self._current = 0
        self._config = config or ControllerClientConfig()
        self._metadata = self._config.call_metadata()
        token = self._config.token
        self._bearer = BearerToken(token, clock=wall_clock) if token is not None else None
        self._sleep = sleep
        self._clock = clock

    @property
    def tls(self) -> TrustConfig | None:
        """The TLS trust of this client when its URI asked for TLS (segment stores are then reached with TLS
        and the same trust, as Pravega's clients do); None for plain text."""
        address = self._endpoints[0].address
        if address is None or not address.tls:
            return None
        return self._config.trust()

    @property
    def current_target(self) -> str:
        """``host:port`` of the controller the next call goes to first (the one that answered last)."""
        return self._endpoints[self._current].target

    @classmethod
    async def connect(cls, uri: str, config: ControllerClientConfig | None = None, *, wait_ready: bool = False) -> Self:
        """A client for the controllers at ``uri`` (``tcp://host:port``, or ``tls://host:port`` for TLS with
        ``config.trust_store``; a list ``tcp://h1:p1,h2:p2`` fails over, module docstring). The channels connect
        lazily; with ``wait_ready`` this waits up to ``retry_timeout_s`` for a connection to one of them and raises
        :class:`ControllerUnavailableError` when there is none (:class:`ControllerTlsError` at once for a
        certificate problem). Raises InvalidArgumentError for a bad URI, TlsConfigError for a trust store or
        client certificate that cannot be used."""
        config = config or ControllerClientConfig()
        controllers = parse_controllers(uri)
        channels: list[grpc.aio.Channel] = []
        try:
            for address in controllers.addresses:
                channels.append(open_channel(address, config))
        except BaseException:
            for opened in channels:
                await opened.close()
            raise
        first, *rest = controllers.addresses
        fallbacks = list(zip(channels[1:], rest, strict=True))
        client = cls(channels[0], config, address=first, fallbacks=fallbacks)
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
        """Close the channels; RPCs in flight are cancelled. Idempotent."""
        for endpoint in self._endpoints:
            await endpoint.channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- transport ------------------------------------------------------------------------------------------
    async def _call(self, rpc: str, request: Any, *, not_found: ControllerError | None = None) -> Any:
        """Invoke ``rpc`` with deadline, UNAVAILABLE retries and failover; map gRPC errors to typed ones.

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

    async def _exchange(self, request: pb.StreamInfo, metadata: Iterable[tuple[str, str]]) -> str:
        resp: pb.DelegationToken = await self._attempts("getDelegationToken", request, metadata, None)
        return resp.delegationToken

    def _after(self, index: int, left_out: set[int]) -> int | None:
        """The next controller after ``index`` in the list (round robin), skipping ``left_out``; None if none."""
        count = len(self._endpoints)
        for step in range(1, count + 1):
            candidate = (index + step) % count
            if candidate not in left_out:
                return candidate
        return None

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
            index = self._current
            failed_in_round = 0  # attempts failed since the last pause
            diagnosed: set[int] = set()  # TLS looked at once per controller and call
            left_out: dict[int, str] = {}  # controller -> its TLS problem: not tried again in this call
            while True:
                endpoint = self._endpoints[index]
                try:
                    answer = await endpoint.method(rpc)(request, timeout=config.rpc_timeout_s, metadata=metadata)
                except grpc.aio.AioRpcError as e:
                    code = e.code()
                    if code != grpc.StatusCode.UNAVAILABLE:
                        if code == grpc.StatusCode.DEADLINE_EXCEEDED and len(self._endpoints) > 1:
                            self._current = self._after(index, set()) or 0  # the next call tries another one
                        raise status_error(rpc, e, endpoint.target, config.rpc_timeout_s, not_found) from e
                    details = e.details() or ""
                    address = endpoint.address
                    if index not in diagnosed and address is not None and address.tls:
                        diagnosed.add(index)  # once per controller: a certificate problem is not retried
                        problem = await diagnose_tls(details, address, config)
                        if problem is not None:
                            left_out[index] = problem
                            if len(left_out) == len(self._endpoints):
                                raise ControllerTlsError(self._tls_failure(rpc, left_out)) from e
                    remaining = give_up_at - self._clock()
                    if remaining <= 0:
                        elapsed = max(self._clock() - started, budget.elapsed_s())
                        message = await unreachable_message(
                            address, endpoint.target, elapsed, details, self._controllers
                        )
                        if left_out:
                            message += f"; {self._tls_failure(rpc, left_out)}"
                        raise deadline.mark_final(ControllerUnavailableError(message)) from e
                except grpc.aio.UsageError as e:
                    raise ControllerError(f"{rpc}: client is closed") from e
                else:
                    self._current = index
                    return answer
                following = self._after(index, set(left_out))
                assert following is not None  # not every controller is left out (else raised above)
                if index not in left_out:  # a controller left out does not count towards the round
                    failed_in_round += 1
                index = following
                if failed_in_round < len(self._endpoints) - len(left_out):
                    continue  # the next controller at once
                failed_in_round = 0  # every controller failed once since the last pause: back off
                await self._sleep(min(backoff, remaining))
                backoff = min(backoff * config.backoff_multiplier, config.max_backoff_s)

    def _tls_failure(self, rpc: str, problems: dict[int, str]) -> str:
        if len(self._endpoints) == 1:
            return f"{rpc}: TLS to controller {self._endpoints[0].target}: {problems[0]}"
        said = "; ".join(f"{self._endpoints[i].target}: {problem}" for i, problem in sorted(problems.items()))
        return f"{rpc}: TLS to controllers {said}"
