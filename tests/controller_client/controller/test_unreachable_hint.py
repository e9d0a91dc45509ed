"""The hint of the "unreachable" message: a plain-text client of a TLS controller is told to use ``tls://``, also
when its host name also names an address that refuses (``localhost`` -> ``::1``, with the server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

from tls_fixtures import make_tls_files

from controller_client.controller.channel import unreachable_message
from controller_client.controller.uri import ControllerAddress


def test_a_refused_first_address_does_not_hide_a_tls_controller(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(files.cert), str(files.key))

    async def body() -> tuple[str, str]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        async with server:
            tls_there = await unreachable_message(
                ControllerAddress("localhost", port, tls=False), f"localhost:{port}", 30.0, "connection refused"
            )
        with socket.create_server(("127.0.0.1", 0)) as closed:
            nothing = closed.getsockname()[1]
        refused = await unreachable_message(
            ControllerAddress("localhost", nothing, tls=False), f"localhost:{nothing}", 30.0, "connection refused"
        )
        return tls_there, refused

    tls_there, refused = asyncio.run(asyncio.wait_for(body(), 30))
    assert tls_there.endswith("connection refused (it serves TLS: use a tls:// URI)"), tls_there
    assert refused.endswith("connection refused (is the controller running, and is the URI right?)"), refused
