"""``ControllerServiceServicer`` assembled from its parts, and the ``grpc.aio`` server that serves it."""

from __future__ import annotations

import grpc

from controller.core import ControllerCore
from controller.rpc.streams import StreamRpcs
from controller.rpc.txns import TxnRpcs
from controller_client.proto import Controller_pb2_grpc as pb_grpc


class ControllerServicer(StreamRpcs, TxnRpcs, pb_grpc.ControllerServiceServicer):
    """Every RPC of ``io.pravega.controller.stub.ControllerService`` over one :class:`ControllerCore`."""

    def __init__(self, core: ControllerCore) -> None:
        self._core = core


async def start_grpc_server(
    core: ControllerCore, host: str, port: int, max_concurrent_rpcs: int
) -> tuple[grpc.aio.Server, int]:
    """Serve ``core`` on ``host:port`` (0 = a free port); returns the server and its port."""
    server = grpc.aio.server(maximum_concurrent_rpcs=max_concurrent_rpcs)
    pb_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(core), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"controller: cannot bind {host}:{port}")
    await server.start()
    return server, bound
