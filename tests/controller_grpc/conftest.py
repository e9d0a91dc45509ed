"""Fixtures of the ControllerClient tests: a scripted gRPC controller and a client connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc.aio
import pytest
from scripted_controller import FAST, ScriptedController

from controller_client.controller.api import ControllerClient
from controller_client.proto import Controller_pb2_grpc as pb_grpc


@pytest.fixture
async def fake() -> AsyncIterator[tuple[ScriptedController, int]]:
    servicer = ScriptedController()
    server = grpc.aio.server()
    pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, port
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def controller(fake: tuple[ScriptedController, int]) -> AsyncIterator[ControllerClient]:
    client = await ControllerClient.connect(f"tcp://127.0.0.1:{fake[1]}", FAST)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def servicer(fake: tuple[ScriptedController, int]) -> ScriptedController:
    return fake[0]
