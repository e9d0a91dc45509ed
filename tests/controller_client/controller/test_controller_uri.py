"""Controller URIs with one controller or a list of them (``controller_client.controller.uri``): what is accepted,
in which order, and the one line a bad URI gets."""

from __future__ import annotations

import pytest

from controller_client.controller.uri import (
    ControllerAddress,
    ControllerList,
    parse_controller_address,
    parse_controllers,
)
from controller_client.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("tcp://h1:9090,h2:9091", [("h1", 9090), ("h2", 9091)]),
        ("h1:1, h2:2 ,h3:3", [("h1", 1), ("h2", 2), ("h3", 3)]),  # no scheme: tcp; blanks around hosts
        ("pravega://a:1,b:2/", [("a", 1), ("b", 2)]),
        ("tcp://[::1]:9090,127.0.0.1:9091", [("::1", 9090), ("127.0.0.1", 9091)]),
        ("tcp://b:2,a:1,b:2", [("b", 2), ("a", 1)]),  # the order kept, a host named twice counts once
        ("tcp://only:7", [("only", 7)]),
    ],
)
def test_parse_controllers_with_a_list_keeps_the_order(uri: str, expected: list[tuple[str, int]]) -> None:
    found = parse_controllers(uri)
    assert [(a.host, a.port) for a in found.addresses] == expected
    assert not found.tls


@pytest.mark.parametrize("scheme", ["tls", "ssl", "tcps", "pravegas", "TLS"])
def test_parse_controllers_with_a_tls_scheme_makes_every_host_tls(scheme: str) -> None:
    found = parse_controllers(f"{scheme}://c1.example:9090,c2.example:9090")
    hosts = ("c1.example", "c2.example")
    assert found == ControllerList(tuple(ControllerAddress(host, 9090, True) for host in hosts))
    assert found.uri == "tls://c1.example:9090,c2.example:9090"


def test_controller_list_uri_is_canonical() -> None:
    assert parse_controllers(" pravega://a:1,[::1]:2 ").uri == "tcp://a:1,[::1]:2"


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("tcp://h1:1,,h2:2", "host 2 is empty"),
        ("tcp://h1:1,", "host 2 is empty"),
        ("tcp://,h1:1", "host 1 is empty"),
        ("tcp://", "no host"),
        ("tcp://h1:1,tls://h2:2", r"host 2 \('tls://h2:2'\): mixes schemes: one scheme for all controllers"),
        ("tls://h1:1,tcp://h2:2", "mixes schemes"),
        ("tcp://h1:1,tcp://h2:2", "give the scheme once, before the first host"),
        ("tcp://h1:1,h2", r"host 2 \('h2'\): no port"),
        ("tcp://h1:99999,h2:2", r"host 1 \('h1:99999'\): the port must be a number from 0 to 65535"),
        ("tcp://h1:x", "the port must be a number"),
        ("tcp://:9090,h2:2", "host 1 .*no host"),
        ("http://h1:1,h2:2", "the scheme must be tcp://"),
        ("tcp://h1:1/path,h2:2", "host 1"),
    ],
)
def test_parse_controllers_rejects_bad_input_in_one_line(uri: str, said: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"controller uri {uri!r}: .*{said}".replace("?", r"\?")) as raised:
        parse_controllers(uri)
    assert "\n" not in str(raised.value)


def test_parse_controller_address_takes_one_controller_only() -> None:
    assert parse_controller_address("tls://h:1") == ControllerAddress("h", 1, True)
    with pytest.raises(InvalidArgumentError, match="expected one controller"):
        parse_controller_address("tcp://h:1,g:2")
