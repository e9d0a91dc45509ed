"""Listening ports: bound exclusively, checked before anything starts, and named in one line when taken.

Every server of segstore binds its ports exclusively: no ``SO_REUSEPORT`` (gRPC sets it by default, asyncio does not),
so a second process told to listen on a taken port fails instead of sharing it with the first (the kernel would
then hand each new connection to one of them at random). Each command that listens checks its fixed ports first
(:func:`unavailable`) and stops naming the flag and the port; a server that fails to bind anyway (another process took
the port in between) raises :class:`PortInUseError`, which the command names the same way (:func:`in_use_line`).

- :class:`PortClaim`: a port a command was told to listen on, with the flag that told it.
- :class:`PortInUseError`: a server could not listen on ``host:port`` because something else does.
- :func:`bind_error`: why ``host:port`` cannot be bound right now (None: it can).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from segstore_shared.errors import SegstoreError

IN_USE = "address already in use"
"""The reason a command gives for a taken port (``--port 9090: address already in use``)."""


class PortInUseError(SegstoreError):
    """A server could not listen on ``host:port``: something else does. ``what`` names the port (``wire port``)."""

    def __init__(self, what: str, host: str, port: int) -> None:
        super().__init__(f"{what} {host}:{port} is already in use")
        self.what = what
        self.host = host
        self.port = port


def is_address_in_use(error: BaseException) -> bool:
    """Whether ``error`` is the kernel's EADDRINUSE (asyncio's bind errors carry it)."""
    return isinstance(error, OSError) and error.errno == errno.EADDRINUSE


def bind_error(host: str, port: int) -> OSError | None:
    """Why a server could not bind ``host:port`` now (every address ``host`` resolves to), or None if it could.

    The probe sets ``SO_REUSEADDR`` (as every server here does) so that connections of a server that just stopped
    (TIME_WAIT) do not count; a socket listening on the port, with or without ``SO_REUSEPORT``, still does."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as error:
        return error
    for family, kind, proto, _, address in dict.fromkeys(infos):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as error:
                return error
    return None


def reason(error: OSError, host: str, port: int) -> str:
    """``address already in use``, or why else ``host:port`` cannot be bound."""
    if is_address_in_use(error):
        return IN_USE
    return f"cannot bind {host}:{port}: {error.strerror or error}"


@dataclass(frozen=True, slots=True)
class PortClaim:
    """A port a command was told to listen on: ``flag`` (``--controller-port``) said ``port`` on ``host``.

    A port derived from a flag's value (the next node's, ``--metrics-port`` + 1) gives that value as ``given`` and
    says what the port is in ``what`` (``the segment store's metrics``)."""

    flag: str
    host: str
    port: int
    given: int | None = None
    what: str = ""

    def line(self, why: str) -> str:
        """``--controller-port 9090: <why>``, or for a derived port ``--metrics-port 9100: port 9101 (what): <why>``."""
        if self.given is None or self.given == self.port:
            return f"{self.flag} {self.port}: {why}"
        return f"{self.flag} {self.given}: port {self.port} ({self.what}): {why}"


def fixed(claims: Iterable[PortClaim]) -> list[PortClaim]:
    """The claims of a fixed port (0 means any free port: nothing to check)."""
    return [claim for claim in claims if claim.port != 0]


def unavailable(claims: Sequence[PortClaim]) -> tuple[PortClaim, str] | None:
    """The first claim that cannot be listened on, and why (``address already in use``; another flag naming the
    same port); None: every fixed port is free. ``claim.line(why)`` is what to tell the user."""
    seen: dict[int, PortClaim] = {}
    for claim in fixed(claims):
        if not 0 < claim.port < 65536:
            return claim, "not a TCP port (1-65535, or 0: a free one)"
        other = seen.setdefault(claim.port, claim)
        if other is not claim:
            return claim, f"also given by {other.flag}"
    for claim in fixed(claims):
        error = bind_error(claim.host, claim.port)
        if error is not None:
            return claim, reason(error, claim.host, claim.port)
    return None


def claim_of(claims: Sequence[PortClaim], error: PortInUseError) -> PortClaim | None:
    """The claim of the port ``error`` is about (None: none claims it; a port chosen free, then taken)."""
    return next((claim for claim in fixed(claims) if claim.port == error.port), None)


def in_use_line(claims: Sequence[PortClaim], error: PortInUseError) -> str:
    """The line naming the flag of the port ``error`` is about (``--port 4222: address already in use``); without a
    claim of that port, the error's own words."""
    claim = claim_of(claims, error)
    return claim.line(IN_USE) if claim is not None else str(error)
