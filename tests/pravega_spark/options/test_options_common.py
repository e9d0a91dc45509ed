"""Option parsing shared by the reader and the writer: case-insensitive, aliases, errors naming the option."""

from __future__ import annotations

import pytest

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.common import DEFAULT_CONTROLLER, Options, StreamTarget

pytestmark = pytest.mark.unit


def test_lookup_is_case_insensitive_and_accepts_aliases() -> None:
    options = Options.of({"MaxBytesPerTrigger": "100", "APPROX_BYTES_PER_TRIGGER": "7", "failondataloss": "FALSE"})
    assert options.integer("maxBytesPerTrigger", None) == 100
    assert options.integer("maxBytesPerTriggerX", None, aliases=["approx_bytes_per_trigger"]) == 7
    assert options.boolean("failOnDataLoss", True) is False
    assert options.integer("missing", 5) == 5


@pytest.mark.parametrize(
    ("values", "option"),
    [({}, "scope"), ({"scope": "s"}, "stream"), ({"scope": "bad/scope", "stream": "x"}, "scope"),
     ({"scope": "s", "stream": "x", "controller": "http://h:1"}, "controller")],
)  # fmt: skip
def test_stream_target_errors_name_the_option(values: dict[str, str], option: str) -> None:
    with pytest.raises(SegstoreOptionError, match=f"^option '{option}'"):
        StreamTarget.parse(Options.of(values))


def test_stream_target_defaults_to_the_local_controller() -> None:
    target = StreamTarget.parse(Options.of({"Scope": "s", "Stream": "x"}))
    assert target == StreamTarget(DEFAULT_CONTROLLER, "s", "x")


@pytest.mark.parametrize("text", ["x", "0", "-3"])
def test_bad_integer_names_the_option(text: str) -> None:
    with pytest.raises(SegstoreOptionError, match=r"^option 'maxBytesPerTrigger': must be an integer >= 1"):
        Options.of({"maxBytesPerTrigger": text}).integer("maxBytesPerTrigger", None)


def test_bad_boolean_names_the_option() -> None:
    with pytest.raises(SegstoreOptionError, match=r"^option 'exactlyOnce'"):
        Options.of({"exactlyonce": "maybe"}).boolean("exactlyOnce", True)


def test_stream_target_takes_tls_controllers_and_a_trust_store() -> None:
    target = StreamTarget.parse(
        Options.of({"controller": "tls://localhost:9090", "TrustStore": " /etc/ca.pem ", "scope": "s", "stream": "x"})
    )
    assert target == StreamTarget("tls://localhost:9090", "s", "x", "/etc/ca.pem")
    alias = StreamTarget.parse(
        Options.of({"controller": "pravegas://h:1", "trust_store": "/ca", "scope": "s", "stream": "x"})
    )
    assert alias.trust_store == "/ca"


def test_stream_target_with_a_trust_store_needs_a_tls_controller() -> None:
    with pytest.raises(SegstoreOptionError, match=r"^option 'trustStore': is for TLS: .*tls://host:port"):
        StreamTarget.parse(
            Options.of({"controller": "tcp://h:1", "trustStore": "/ca.pem", "scope": "s", "stream": "x"})
        )


def test_stream_target_takes_a_list_of_controllers() -> None:
    options = {"controller": "tls://c1:9090,c2:9090", "trustStore": "/ca.pem", "scope": "s", "stream": "x"}
    target = StreamTarget.parse(Options.of(options))
    assert target == StreamTarget("tls://c1:9090,c2:9090", "s", "x", "/ca.pem")


@pytest.mark.parametrize(
    ("controller", "said"),
    [
        ("tcp://c1:9090,,c2:9090", "host 2 is empty"),
        ("tcp://c1:9090,tls://c2:9090", "mixes schemes"),
        ("tcp://c1:9090,c2:port", "the port must be a number"),
        ("tcp://c1:9090,c2", "no port"),
    ],
)
def test_a_bad_controller_list_fails_in_one_line_naming_the_option(controller: str, said: str) -> None:
    with pytest.raises(SegstoreOptionError, match=f"^option 'controller': controller uri .*{said}") as raised:
        StreamTarget.parse(Options.of({"controller": controller, "scope": "s", "stream": "x"}))
    assert "\n" not in str(raised.value)
