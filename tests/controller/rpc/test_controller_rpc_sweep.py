"""Every Controller.proto RPC, over a real grpc.aio server, with empty, boundary and random messages: the answer
is a reply or a deliberate status (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, ...), never UNKNOWN or INTERNAL
(an exception that escaped), the controller keeps serving, and a refused request (a gRPC error, or a reply
whose status is not a success) leaves the metadata in ZooKeeper's tree as it was (every node's data; a version
may move when a state is set and set back): nothing half-written.
Scope ``a`` with stream ``a`` exists, so random requests also reach a real stream ("a" is one of the texts)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from controller_env import ControllerEnv
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.rpc.servicer import start_grpc_server
from controller_client.model import ScalingPolicy, StreamConfiguration
from controller_client.proto import Controller_pb2 as pb

pytestmark = pytest.mark.integration

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]
METHODS = [m for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]
BAD = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
SUCCESSES = {"SUCCESS", "STARTED", "OK"}
"""Values of a reply's ``status``/``result`` enum after which a request may have changed the metadata."""

INTS = st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 4294967296]) | st.integers(
    -(2**63), 2**63 - 1
)
TEXTS = st.sampled_from(["", " ", "a", "../x", "scope/stream", "x" * 300, "\u00e9\u4e2d", "_sys"]) | st.text(
    max_size=20
)


@pytest.fixture
async def channel(env: ControllerEnv) -> AsyncIterator[grpc.aio.Channel]:
    core = env.core()
    await core.create_scope("a")
    await core.create_stream("a", "a", StreamConfiguration(ScalingPolicy.fixed(2)))
    server, port = await start_grpc_server(core, "127.0.0.1", 0, 16)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(None)


def scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in (FieldDescriptor.TYPE_STRING,):
        return st.just("a") | TEXTS  # half the names are the existing scope and stream
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=16)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values] + [99])
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.integers(0, 2**64 - 1)
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return st.integers(-(2**31), 2**31 - 1)
    return INTS


@st.composite
def message(draw: st.DrawFn, descriptor: Any, depth: int = 0) -> Any:
    """A message of ``descriptor`` with a random subset of its fields set to boundary or random values."""
    built = getattr(pb, descriptor.name)() if descriptor.containing_type is None else None
    if built is None:  # a nested type
        built = getattr(getattr(pb, descriptor.containing_type.name), descriptor.name)()
    if descriptor.name in ("StreamInfo", "ScopeInfo") and draw(st.booleans()):
        for name in ("scope", "stream"):  # the scope and stream that exist
            if name in descriptor.fields_by_name:
                setattr(built, name, "a")
        return built
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.name in ("StreamInfo", "ScopeInfo"):
            if not draw(st.integers(0, 3)):  # usually there: most requests name a stream
                continue
        elif not draw(st.booleans()):
            continue
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                key_field, value_field = field.message_type.fields
                for _ in range(draw(st.integers(0, 2))):
                    key = draw(scalar(key_field))
                    target = getattr(built, field.name)
                    if value_field.message_type is not None:
                        if depth < 2:
                            target[key].CopyFrom(draw(message(value_field.message_type, depth + 1)))
                    else:
                        target[key] = draw(scalar(value_field))
            elif depth < 2:
                values = [draw(message(field.message_type, depth + 1)) for _ in range(draw(st.integers(1, 2)))]
                if field.is_repeated:
                    getattr(built, field.name).extend(values)
                else:
                    getattr(built, field.name).CopyFrom(values[0])
        elif field.is_repeated:
            getattr(built, field.name).extend(draw(st.lists(scalar(field), max_size=3)))
        else:
            setattr(built, field.name, draw(scalar(field)))
    return built


async def call(channel: grpc.aio.Channel, method: Any, request: Any) -> grpc.StatusCode:
    return (await call_for_reply(channel, method, request))[0]


async def call_for_reply(channel: grpc.aio.Channel, method: Any, request: Any) -> tuple[grpc.StatusCode, Any]:
    invoke = channel.unary_unary(
        f"/{SERVICE.full_name}/{method.name}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=getattr(pb, method.output_type.name).FromString,
    )
    try:
        reply = await invoke(request, timeout=20)
    except grpc.aio.AioRpcError as error:
        return error.code(), None
    return grpc.StatusCode.OK, reply


def refused(code: grpc.StatusCode, reply: Any) -> str | None:
    """Why the request was refused (a gRPC error, or a reply's non-success status), or None if it succeeded."""
    if code != grpc.StatusCode.OK:
        return code.name
    for field in reply.DESCRIPTOR.fields:
        if field.name in ("status", "result") and field.enum_type is not None:
            name = field.enum_type.values_by_number[getattr(reply, field.name)].name
            return None if name in SUCCESSES else name
    return None


async def test_every_rpc_with_an_empty_message(channel: grpc.aio.Channel) -> None:
    codes = {m.name: await call(channel, m, getattr(pb, m.input_type.name)()) for m in METHODS}
    assert not {name: code for name, code in codes.items() if code in BAD}
    assert await call(channel, SERVICE.methods_by_name["listScopes"], pb.ScopesRequest()) == grpc.StatusCode.OK


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
async def test_every_rpc_with_boundary_and_random_messages(
    env: ControllerEnv, channel: grpc.aio.Channel, data: st.DataObject
) -> None:
    method = data.draw(st.sampled_from(METHODS))
    request = data.draw(message(method.input_type))
    before = {path: data for path, (data, _) in env.coordination.snapshot().items()}
    code, reply = await call_for_reply(channel, method, request)
    assert code not in BAD, f"{method.name}({request}) -> {code}"
    why = refused(code, reply)
    if why is not None:
        after = {path: data for path, (data, _) in env.coordination.snapshot().items()}
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        assert not changed, f"{method.name}({request}) was refused ({why}) but changed {changed}"
