"""Wire-version negotiation with ``Hello`` (what Pravega's ``AppendProcessor.hello`` checks)."""

from __future__ import annotations

from segment_store.protocol.commands.connection import Hello
from segment_store.protocol.constants import OLDEST_COMPATIBLE_VERSION, WIRE_VERSION
from segment_store.protocol.errors import IncompatibleVersionError


def local_hello() -> Hello:
    """The ``Hello`` we send: we speak ``WIRE_VERSION`` down to ``OLDEST_COMPATIBLE_VERSION``."""
    return Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION)


def is_compatible(peer: Hello) -> bool:
    """True if the peer's version range overlaps ours. Never raises."""
    return (
        peer.low_version <= peer.high_version
        and peer.low_version <= WIRE_VERSION
        and peer.high_version >= OLDEST_COMPATIBLE_VERSION
    )


def negotiate(peer: Hello) -> int:
    """The wire version to speak with ``peer``: the highest version both sides know.

    Raises :class:`IncompatibleVersionError` (a ProtocolError) naming both ranges if they do not overlap
    (the peer's lowest is above ``WIRE_VERSION`` or its highest below ``OLDEST_COMPATIBLE_VERSION``) or if
    the peer's range is inverted. Java answers with its own ``Hello`` and then closes; a server should send
    :func:`local_hello` before closing the connection.
    """
    if not is_compatible(peer):
        raise IncompatibleVersionError(
            f"peer speaks wire versions {peer.low_version}..{peer.high_version}; "
            f"we speak {OLDEST_COMPATIBLE_VERSION}..{WIRE_VERSION}",
            peer.high_version,
            peer.low_version,
        )
    return min(WIRE_VERSION, peer.high_version)
