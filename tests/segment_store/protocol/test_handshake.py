"""Hello negotiation: we speak 15 and accept any peer whose range reaches down to 5."""

from __future__ import annotations

import pytest

from segment_store.protocol import (
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    Hello,
    IncompatibleVersionError,
    ProtocolError,
    is_compatible,
    local_hello,
    negotiate,
)

pytestmark = pytest.mark.unit


def test_local_hello_with_our_range() -> None:
    assert (WIRE_VERSION, OLDEST_COMPATIBLE_VERSION) == (15, 5)
    assert local_hello() == Hello(15, 5)


@pytest.mark.parametrize(
    ("high", "low", "agreed"),
    [
        (15, 5, 15),
        (17, 5, 15),
        (17, 16, None),
        (15, 15, 15),
        (10, 1, 10),
        (5, 5, 5),
        (4, 1, None),
        (200, 15, 15),
    ],
)
def test_negotiate_with_peer_range(high: int, low: int, agreed: int | None) -> None:
    peer = Hello(high, low)
    assert is_compatible(peer) is (agreed is not None)
    if agreed is None:
        with pytest.raises(IncompatibleVersionError, match=f"{low}..{high}.*5..15") as info:
            negotiate(peer)
        assert isinstance(info.value, ProtocolError)
        assert not info.value.retriable
        assert (info.value.peer_high, info.value.peer_low) == (high, low)
    else:
        assert negotiate(peer) == agreed


def test_negotiate_with_inverted_range() -> None:
    with pytest.raises(IncompatibleVersionError):
        negotiate(Hello(5, 10))
