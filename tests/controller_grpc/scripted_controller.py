"""A scripted in-test gRPC controller on 127.0.0.1 for the ControllerClient tests.

The fake subclasses the generated ``ControllerServiceServicer``; each rpc it implements records
the request and plays the next scripted action (a response message, a gRPC status code to abort
with, or a coroutine function computing the response). Rpcs it does not implement answer
UNIMPLEMENTED, as the generated base class does. The fixtures (``fake``, ``controller``,
``servicer``) are in this folder's ``conftest.py``.
"""

from __future__ import annotations

import socket
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from controller_client.controller.api import ControllerClientConfig
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc

FAST = ControllerClientConfig(rpc_timeout_s=5.0, retry_timeout_s=5.0, initial_backoff_s=0.01, max_backoff_s=0.05)
INFO = pb.StreamInfo(scope="sc", stream="st")
Action = Any  # a response message, a grpc.StatusCode, or an async callable(request) -> response


class ScriptedController(pb_grpc.ControllerServiceServicer):
    """Plays scripted actions per rpc; the last action of an rpc repeats."""

    def __init__(self) -> None:
        self.requests: dict[str, list[Any]] = defaultdict(list)
        self._script: dict[str, deque[Action]] = defaultdict(deque)

    def on(self, rpc: str, *actions: Action) -> None:
        self._script[rpc].extend(actions)

    async def _play(self, rpc: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.requests[rpc].append(request)
        script = self._script[rpc]
        if not script:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} not scripted")
        action = script.popleft() if len(script) > 1 else script[0]
        if isinstance(action, grpc.StatusCode):
            await context.abort(action, f"scripted {action.name}")
        if callable(action):
            return await action(request)
        return action


def _scripted(rpc: str) -> Callable[..., Awaitable[Any]]:
    async def handler(self: ScriptedController, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._play(rpc, request, context)

    return handler


for _rpc in [
    "createScope",
    "deleteScope",
    "checkScopeExists",
    "listScopes",
    "createStream",
    "updateStream",
    "truncateStream",
    "sealStream",
    "deleteStream",
    "checkStreamExists",
    "getStreamConfiguration",
    "listStreamsInScope",
    "listStreamsInScopeForTag",
    "getCurrentSegments",
    "getEpochSegments",
    "getSegments",
    "getSegmentsImmediatelyFollowing",
    "getSegmentsBetween",
    "scale",
    "checkScale",
    "getURI",
    "isSegmentValid",
    "isStreamCutValid",
    "createTransaction",
    "commitTransaction",
    "abortTransaction",
    "pingTransaction",
    "checkTransactionState",
    "createReaderGroup",
    "getReaderGroupConfig",
    "updateReaderGroup",
    "deleteReaderGroup",
    "listSubscribers",
    "updateSubscriberStreamCut",
    "getDelegationToken",
    "getControllerServerList",
]:
    setattr(ScriptedController, _rpc, _scripted(_rpc))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
