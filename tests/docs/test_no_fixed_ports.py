"""No test listens on a fixed port: two runs on one machine (engineers, CI) would take each other's ports. A test
binds port 0 or a port :func:`~segstore_shared.coordination.zookeeper_server.free_port` picked.

Read from the tests' source (no test is run): a ``bind``/server call given ``(host, N)`` or ``port=N``, and a
command line with ``--port N`` (or any ``--*-port N``), N a literal other than 0. A port in data (a configuration
rendered, an address in a message) is not a listen and is not looked at.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]
LISTENERS = frozenset({"bind", "create_server", "start_server", "HTTPServer", "ThreadingHTTPServer", "TCPServer",
                       "start_http_server", "add_insecure_port", "add_secure_port"})  # fmt: skip


def _fixed(node: ast.expr) -> bool:
    """A literal port other than 0: ``12345`` or ``"12345"``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value != 0
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isdigit() and node.value != "0"


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def fixed_ports(source: str) -> Iterator[int]:
    """The lines of ``source`` that listen on a literal port (see the module docstring)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node) in LISTENERS:
            addresses = [arg for arg in node.args if isinstance(arg, ast.Tuple) and len(arg.elts) == 2]
            if any(_fixed(address.elts[1]) for address in addresses):
                yield node.lineno
            if any(k.arg == "port" and _fixed(k.value) for k in node.keywords):
                yield node.lineno
            if any(isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.rsplit(":", 1)[-1]
                   .isdigit() and arg.value.rsplit(":", 1)[-1] != "0" for arg in node.args):  # fmt: skip
                yield node.lineno  # add_insecure_port("127.0.0.1:50051")
        if isinstance(node, ast.List | ast.Tuple):
            for flag, value in zip(node.elts, node.elts[1:], strict=False):
                text = flag.value if isinstance(flag, ast.Constant) and isinstance(flag.value, str) else ""
                if text.startswith("--") and text.endswith("port") and _fixed(value):
                    yield node.lineno


def test_fixed_ports_finds_each_kind_of_listen() -> None:
    source = """
sock.bind(("127.0.0.1", 12345))
HTTPServer(("127.0.0.1", 9090), Handler)
await asyncio.start_server(handle, "127.0.0.1", port=8222)
server.add_insecure_port("127.0.0.1:2181")
subprocess.Popen(["segstore", "controller", "--port", "9090", "--metrics-port", str(port)])
sock.bind(("127.0.0.1", 0))
sock.bind(("127.0.0.1", free_port()))
config = NatsServerConfig(port=4222)
["segstore", "segmentstore", "--port", str(port), "--metrics-port", "0"]
"""
    assert sorted(fixed_ports(source)) == [2, 3, 4, 5, 6]


def test_no_test_listens_on_a_fixed_port() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name
        for line in fixed_ports(path.read_text())
    ]
    assert found == [], f"a test listens on a fixed port (use 0 or free_port()): {found}"
