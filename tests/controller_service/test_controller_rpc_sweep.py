"""Every Controller.proto RPC, over a real grpc.aio server, with empty, boundary and random messages: the answer
is a reply or a deliberate status (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, ...), never UNKNOWN or INTERNAL
(an exception that escaped), and the controller keeps serving."""

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
from controller_client.proto import Controller_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]
METHODS = [m for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]
BAD = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)

INTS = st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 4294967296]) | st.integers(
    -(2**63), 2**63 - 1
)
TEXTS = st.sampled_from(["", " ", "a", "../x", "scope/stream", "x" * 300, "\u00e9\u4e2d", "_sys"]) | st.text(
    max_size=20
)


@pytest.fixture
async def env() -> AsyncIterator[ControllerEnv]:
    environment = await ControllerEnv.start()
    try:
        yield environment
    finally:
        await environment.close()


@pytest.fixture
async def channel(env: ControllerEnv) -> AsyncIterator[grpc.aio.Channel]:
    server, port = await start_grpc_server(env.core(), "127.0.0.1", 0, 16)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(None)


def scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in (FieldDescriptor.TYPE_STRING,):
        return TEXTS
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
    for field in descriptor.fields:
        if not draw(st.booleans()):
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
    invoke = channel.unary_unary(
        f"/{SERVICE.full_name}/{method.name}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=getattr(pb, method.output_type.name).FromString,
    )
    try:
        await invoke(request, timeout=20)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_every_rpc_with_an_empty_message(channel: grpc.aio.Channel) -> None:
    codes = {m.name: await call(channel, m, getattr(pb, m.input_type.name)()) for m in METHODS}
    assert not {name: code for name, code in codes.items() if code in BAD}
    assert await call(channel, SERVICE.methods_by_name["listScopes"], pb.ScopesRequest()) == grpc.StatusCode.OK


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
async def test_every_rpc_with_boundary_and_random_messages(channel: grpc.aio.Channel, data: st.DataObject) -> None:
    method = data.draw(st.sampled_from(METHODS))
    request = data.draw(message(method.input_type))
    code = await call(channel, method, request)
    assert code not in BAD, f"{method.name}({request}) -> {code}"
