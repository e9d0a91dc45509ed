"""How every RPC handles errors that its status enum does not cover.

:func:`rpc` wraps a servicer method: the domain call runs; an error the method did not turn into a
status value of its response becomes a gRPC status with a message:

- with authentication on (the servicer's ``_auth``), the caller is authenticated and authorized first
  (``authentication``): wrong or missing credentials -> ``UNAUTHENTICATED``, a missing permission ->
  ``PERMISSION_DENIED``; the caller is in ``authentication.caller`` while the method runs;
- :class:`~controller_client.model.InvalidModelError` (malformed request) -> ``INVALID_ARGUMENT``;
- retriable errors (ZooKeeper or a segment store unreachable, a stream busy with another operation)
  -> ``UNAVAILABLE``, which Pravega clients retry;
- a missing scope or stream (of a query whose response has no status for it) -> ``NOT_FOUND``, as Pravega's
  controller answers (its ``DataNotFoundException``);
- other controller errors (a failed precondition) -> ``FAILED_PRECONDITION``;
- ``NotImplementedError`` -> ``UNIMPLEMENTED``;
- anything else -> ``INTERNAL`` (logged with its traceback).

With metrics (the servicer's ``_metrics``), every call is counted by name and status code and timed.

Nothing is half-written by a rejected request: requests are decoded and validated before the first
metadata write.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from controller.errors import ControllerError, ScopeNotFoundError, StreamNotFoundError
from controller.rpc.authentication import AuthenticationError, PermissionDeniedError, caller
from controller_client.model import InvalidModelError

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext], Awaitable[Resp]]


def _code_for(error: BaseException) -> grpc.StatusCode:
    if isinstance(error, AuthenticationError):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(error, PermissionDeniedError):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(error, InvalidModelError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if getattr(error, "retriable", False):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(error, ScopeNotFoundError | StreamNotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, ControllerError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(error, NotImplementedError):
        return grpc.StatusCode.UNIMPLEMENTED
    return grpc.StatusCode.INTERNAL


def rpc(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Wrap a servicer method with the error mapping above."""

    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        metrics = getattr(self, "_metrics", None)
        if metrics is None:
            return await handle(self, request, context)
        started = time.perf_counter()
        code = "UNKNOWN"
        try:
            response = await handle(self, request, context)
            code = "OK"
            return response
        except grpc.aio.AbortError:
            aborted = context.code()
            code = aborted.name if isinstance(aborted, grpc.StatusCode) else "UNKNOWN"
            raise
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            metrics.rpc(name, code, time.perf_counter() - started)

    async def handle(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            auth = getattr(self, "_auth", None)
            if auth is None:
                return await method(self, request, context)
            who = await auth.authenticate(context.invocation_metadata(), method.__name__, context.peer())
            auth.authorize(who, method.__name__, request)
            token = caller.set(who)
            try:
                return await method(self, request, context)
            finally:
                caller.reset(token)
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            code = _code_for(error)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method.__name__)
            else:
                log.debug("%s: %s: %s", method.__name__, code.name, error)
            await context.abort(code, f"{method.__name__}: {error}")
            raise AssertionError("unreachable") from error  # abort raises

    return wrapper


async def unimplemented(context: grpc.aio.ServicerContext, name: str, why: str) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not supported by segstore: {why}")
