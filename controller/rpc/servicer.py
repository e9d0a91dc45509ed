"""``ControllerServiceServicer`` assembled from its parts, and the ``grpc.aio`` server that serves it."""

from __future__ import annotations

import grpc

from controller.core import ControllerCore
from controller.metrics import ControllerMetrics
from controller.rpc.admin import AdminRpcs, admin_handler
from controller.rpc.authentication import ControllerAuth
from controller.rpc.kvts import KvtRpcs
from controller.rpc.streams import StreamRpcs
from controller.rpc.txns import TxnRpcs
from controller_client.proto import Controller_pb2_grpc as pb_grpc
from segstore_shared.auth.tls import TlsConfig
from segstore_shared.ports import PortInUseError, bind_error, is_address_in_use

EXCLUSIVE_PORT = [("grpc.so_reuseport", 0)]
"""gRPC server options: bind the port without ``SO_REUSEPORT`` (gRPC sets it by default)."""


class ControllerServicer(StreamRpcs, TxnRpcs, KvtRpcs, pb_grpc.ControllerServiceServicer):
    """Every RPC of ``io.pravega.controller.stub.ControllerService`` over one :class:`ControllerCore`."""

    def __init__(
        self, core: ControllerCore, auth: ControllerAuth | None = None, metrics: ControllerMetrics | None = None
    ) -> None:
        self._core = core
        self._auth = auth
        self._metrics = metrics  # None: RPCs are not measured (controller.rpc.handling)


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """gRPC's TLS credentials from ``tls`` (checked first: TlsConfigError names a bad file). gRPC speaks TLS 1.2
    and later and negotiates ALPN ``h2`` itself; with ``ca_path`` it requires and verifies client certificates."""
    pem = tls.pem()
    return grpc.ssl_server_credentials(
        [(pem.private_key, pem.certificate_chain)],
        root_certificates=pem.client_ca,
        require_client_auth=pem.client_ca is not None,
    )


async def start_grpc_server(
    core: ControllerCore,
    host: str,
    port: int,
    max_concurrent_rpcs: int,
    tls: TlsConfig | None = None,
    auth: ControllerAuth | None = None,
    metrics: ControllerMetrics | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Serve ``core`` on ``host:port`` (0 = a free port), with TLS if ``tls`` is given; returns the server and
    its port. The port is bound exclusively (gRPC's default ``SO_REUSEPORT`` off: a second controller on the port
    fails instead of sharing it): PortInUseError if something else listens there."""
    credentials = server_credentials(tls) if tls is not None else None
    server = grpc.aio.server(maximum_concurrent_rpcs=max_concurrent_rpcs, options=EXCLUSIVE_PORT)
    pb_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(core, auth, metrics), server)
    server.add_generic_rpc_handlers((admin_handler(AdminRpcs(core, auth, metrics)),))
    address = f"{host}:{port}"
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:  # gRPC says only "Failed to bind to address"
        bound = 0
    if bound == 0:
        error = bind_error(host, port) if port != 0 else None
        if error is not None and is_address_in_use(error):
            raise PortInUseError("controller gRPC port", host, port)
        raise OSError(f"controller: cannot bind {host}:{port}" + (f": {error.strerror}" if error else ""))
    await server.start()
    return server, bound
