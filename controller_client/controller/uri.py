"""Controller URIs: one scheme, then one controller or a comma-separated list of them, as Pravega's clients take.

``tcp://h1:9090,h2:9090`` (also ``pravega://`` or no scheme) is plain text; ``tls://h1:9090,h2:9090`` (also
``ssl://``, ``tcps://``, ``pravegas://``) is TLS to every one of them, and then the segment stores are reached with
TLS too. IPv6 hosts are written ``[::1]:9090``. The scheme is given once, before the first host, and holds for all:
a URI that mixes schemes, leaves a host empty (``tcp://h1:9090,,h2:9090``), gives a host no port or a port out of
range is refused with one line naming the URI and what is wrong (:class:`InvalidArgumentError`). A host named twice
counts once. The order is kept: a client starts with the first controller and moves down the list
(:mod:`controller_client.controller.transport`).

Invariants: a parsed :class:`ControllerList` holds at least one address, no address twice, and every address has
the same ``tls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from controller_client.errors import InvalidArgumentError
from segstore_shared.auth.tls import is_tls_scheme

_PLAIN_SCHEMES = ("tcp", "pravega")
_EXPECTED = "expected tcp://host:port or tls://host:port, or a list tcp://host1:port1,host2:port2"


@dataclass(frozen=True, slots=True)
class ControllerAddress:
    """One controller of a parsed URI."""

    host: str
    port: int
    tls: bool

    @property
    def target(self) -> str:
        """gRPC's ``host:port`` (``[v6]:port``); with TLS, ``host`` is the name the certificate must hold."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def uri(self) -> str:
        """The URI this address was given as, in its canonical form (``tcp://host:port``, ``tls://host:port``)."""
        return f"{'tls' if self.tls else 'tcp'}://{self.target}"


@dataclass(frozen=True, slots=True)
class ControllerList:
    """The controllers of one URI, in the order given (module docstring for the invariants)."""

    addresses: tuple[ControllerAddress, ...]

    @property
    def tls(self) -> bool:
        return self.addresses[0].tls

    @property
    def uri(self) -> str:
        """The canonical URI: ``tcp://h1:p1,h2:p2`` (one scheme, then the hosts)."""
        return f"{'tls' if self.tls else 'tcp'}://{','.join(a.target for a in self.addresses)}"


def _scheme(uri: str, text: str) -> tuple[str, str]:
    """``(scheme, the rest)``: ``tcp`` when none is given."""
    scheme, separator, rest = text.partition("://")
    if not separator:
        return "tcp", text
    scheme = scheme.lower()
    if scheme not in _PLAIN_SCHEMES and not is_tls_scheme(scheme):
        raise InvalidArgumentError(
            f"controller uri {uri!r}: the scheme must be tcp:// (plain text) or tls:// (also ssl, tcps, pravegas)"
        )
    return scheme, rest


def _address(uri: str, scheme: str, item: str, position: int, many: bool) -> ControllerAddress:
    where = f"controller uri {uri!r}: " + (f"host {position} ({item!r}): " if many else "")
    if "://" in item:
        other = item.partition("://")[0].lower()
        if is_tls_scheme(other) != is_tls_scheme(scheme):
            raise InvalidArgumentError(f"{where}mixes schemes: one scheme for all controllers, {_EXPECTED}")
        raise InvalidArgumentError(f"{where}give the scheme once, before the first host: {_EXPECTED}")
    parts = urlsplit(f"tcp://{item}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is no number, or out of range
        raise InvalidArgumentError(f"{where}the port must be a number from 0 to 65535: {_EXPECTED}") from None
    if not host:
        raise InvalidArgumentError(f"{where}no host: {_EXPECTED}")
    if port is None:
        raise InvalidArgumentError(f"{where}no port: {_EXPECTED}")
    if parts.path or parts.query or parts.fragment or parts.username is not None:
        raise InvalidArgumentError(f"{where}{_EXPECTED}")
    return ControllerAddress(host, port, is_tls_scheme(scheme))


def parse_controllers(uri: str) -> ControllerList:
    """One controller or a comma-separated list (module docstring) -> the addresses, in order.
    Raises :class:`InvalidArgumentError` (one line naming the URI) for bad input."""
    text = uri.strip()
    scheme, rest = _scheme(uri, text)
    rest = rest.removesuffix("/")
    items = [item.strip() for item in rest.split(",")]
    many = len(items) > 1
    if not rest.strip():
        raise InvalidArgumentError(f"controller uri {uri!r}: no host: {_EXPECTED}")
    addresses: list[ControllerAddress] = []
    for position, item in enumerate(items, start=1):
        if not item:
            raise InvalidArgumentError(f"controller uri {uri!r}: host {position} is empty: {_EXPECTED}")
        address = _address(uri, scheme, item, position, many)
        if address not in addresses:
            addresses.append(address)
    return ControllerList(tuple(addresses))


def parse_controller_address(uri: str) -> ControllerAddress:
    """A URI naming exactly one controller -> its address (a list is refused: :func:`parse_controllers` takes it)."""
    found = parse_controllers(uri)
    if len(found.addresses) != 1:
        raise InvalidArgumentError(
            f"controller uri {uri!r}: expected one controller, tcp://host:port or tls://host:port"
        )
    return found.addresses[0]


def parse_controller_uri(uri: str) -> tuple[str, int]:
    """``tcp://host:port`` (or ``tls://``, ``pravega://``, bare ``host:port``; IPv6 as ``[::1]``) -> (host, port)."""
    address = parse_controller_address(uri)
    return address.host, address.port
