"""Delegation tokens: the HS512 JWTs the controller signs and the segment stores verify, as Pravega does.

A token is ``b64url(header).b64url(body).b64url(HMAC-SHA512)``, with the header ``{"alg":"HS512"}`` (no
``typ``, as Pravega's jjwt 0.9.1 writes it) and the body, in jjwt's order::

    {"sub":"segmentstoreresource","aud":"segmentstore","iat":<s>,"<resource>":"<PERMISSION>","exp":<s>}

``exp`` is always present: the Rust client (``pravega-client-rust`` ``auth``) reads it without verifying,
by base64-decoding the body with the STANDARD alphabet and matching ``"exp":\\s?(\\d+)``, and panics if either
fails. So the body is written compactly and its base64url never contains ``-`` or ``_``: a base64 digit is
``-`` (62, ``111110``) or ``_`` (63, ``111111``) only when its six bits are the low six of a byte equal to
``0x3e``/``0x3f`` modulo 64 (ASCII ``>``, ``?``, ``~``, DEL) or include the high bit of a byte of 0x80 or more;
the body is therefore written in ASCII only, with ``>``, ``?``, ``~`` and DEL escaped as JSON ``\\u`` escapes
(non-ASCII characters are escaped by ``json``). Every JSON reader (jjwt's Jackson, PyJWT, ours) decodes the
same claims; nothing depends on the resource name.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jwt import PyJWS
from jwt.algorithms import HMACAlgorithm
from jwt.exceptions import InvalidAlgorithmError, InvalidSignatureError, PyJWTError
from jwt.utils import base64url_encode

from segstore_shared.auth.acl import Permission
from segstore_shared.errors import RetriableError, SegstoreError

__all__ = [
    "AUDIENCE",
    "RENEW_UNTIL_CLAIM",
    "SUBJECT",
    "USER_CLAIM",
    "Renewal",
    "TokenError",
    "TokenExpiredError",
    "TokenInvalidError",
    "TokenSigner",
    "TokenVerifier",
    "claim_key_matches",
    "renew_at",
    "stream_grant",
    "token_expiry",
    "unverified_claims",
]

SUBJECT = "segmentstoreresource"
AUDIENCE = "segmentstore"
ALGORITHM = "HS512"
MASTER_RESOURCE = "*"
USER_CLAIM = "segstore:user"
"""segstore's claim: the user the controller issued the token to (checked again when the token is renewed)."""
RENEW_UNTIL_CLAIM = "segstore:renewUntil"
"""segstore's claim: until when (epoch s) the token may be exchanged at the controller for a fresh one, even
after its ``exp``. Neither claim can name a segment (``:`` is not allowed in scope names), and neither value
is a permission name, so Pravega's and the Rust client's readers pass over them."""
# the claims that are not resource -> permission (Pravega's JwtParser.CLAIMS_TO_FILTER, and segstore's two)
_STANDARD_CLAIMS = frozenset({"sub", "aud", "exp", "iat", USER_CLAIM, RENEW_UNTIL_CLAIM})
# the only ASCII characters whose byte can encode to '-' or '_' (see the module docstring)
_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in ">?~\x7f"}
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
# the Rust client's (and Pravega's JwtUtils') reading of exp
RUST_EXP_PATTERN = re.compile(r'"exp":\s?(?P<body>\d+)')
# Pravega's TokenVerifierImpl.RESOURCE_PARTS_TO_REPLACE
_RESOURCE_PARTS = re.compile(r"prn::|/scope:|stream:")
_STREAM_RESOURCE = re.compile(r"prn::/scope:(?P<scope>[^/]+)/stream:(?P<stream>[^/]+)")


class TokenError(SegstoreError):
    """A delegation token does not allow the request (Pravega's ``TokenException``)."""


class TokenExpiredError(TokenError, RetriableError):
    """The token's ``exp`` has passed: a fresh token from the controller will do (reply ``TOKEN_EXPIRED``)."""


class TokenInvalidError(TokenError):
    """Malformed, badly signed, for another audience, or not granting that permission on that segment
    (reply ``TOKEN_CHECK_FAILED``)."""


class _PravegaHS512(HMACAlgorithm):
    """HMAC-SHA512 with any non-empty key, as jjwt 0.9.1 takes it (Pravega standalone signs with ``secret``).

    PyJWT warns about keys shorter than the digest and refuses keys that look like PEM or JWK text; Pravega's
    signing key is an operator's string, used as its UTF-8 bytes, so neither applies.
    """

    def __init__(self) -> None:
        super().__init__(HMACAlgorithm.SHA512)

    def prepare_key(self, key: str | bytes) -> bytes:
        return key.encode("utf-8") if isinstance(key, str) else bytes(key)

    def check_key_length(self, key: bytes) -> str | None:
        return None


def _jws() -> PyJWS:
    jws = PyJWS(algorithms=[])
    jws.register_algorithm(ALGORITHM, _PravegaHS512())
    return jws


def _key_bytes(key: bytes | str) -> bytes:
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not data:
        raise ValueError("the token signing key must not be empty")
    return data


def _body(claims: dict[str, Any]) -> bytes:
    """The compact JSON body, in ``claims`` order, ASCII only with the four dangerous characters escaped."""
    return json.dumps(claims, separators=(",", ":"), ensure_ascii=True).translate(_ESCAPES).encode("ascii")


class TokenSigner:
    """Signs delegation tokens with ``key`` (Pravega's ``delegationToken.signingKey.basis``; str → UTF-8 bytes).

    ``ttl_s`` (Pravega's ``delegationToken.ttl.seconds``, default 600) must be ≥ 0: Pravega's ``-1`` (no
    ``exp``) makes the Rust client panic, so it is refused here. ``clock`` gives epoch seconds.
    """

    def __init__(self, key: bytes | str, ttl_s: int = 600, clock: Callable[[], float] = time.time) -> None:
        if ttl_s < 0:
            raise ValueError(f"ttl_s must be >= 0 (every token carries exp), not {ttl_s}")
        self._key = _key_bytes(key)
        self._ttl_s = ttl_s
        self._clock = clock
        self._jws = _jws()

    @property
    def ttl_s(self) -> int:
        return self._ttl_s

    def sign(
        self, resource: str, permission: Permission, *, user: str | None = None, renew_until: int | None = None
    ) -> str:
        """A token granting ``permission`` on ``resource`` (e.g. ``prn::/scope:s/stream:t``), valid ``ttl_s``.

        ``user`` and ``renew_until`` (epoch s) make it renewable (:meth:`TokenVerifier.renewal`); its ``exp``
        is then never past ``renew_until``."""
        if not resource or resource in _STANDARD_CLAIMS:
            raise ValueError(f"a token resource must be non-empty and not one of {sorted(_STANDARD_CLAIMS)}")
        return self._sign(resource, Permission(permission), user, renew_until)

    def sign_master(self) -> str:
        """The controller's own token for its calls to segment stores: ``{"*": "READ_UPDATE"}``.

        Pravega's master token has no ``exp``; ours has one like every other token.
        """
        return self._sign(MASTER_RESOURCE, Permission.READ_UPDATE)

    def _sign(
        self, resource: str, permission: Permission, user: str | None = None, renew_until: int | None = None
    ) -> str:
        issued = int(self._clock())
        claims: dict[str, Any] = {"sub": SUBJECT, "aud": AUDIENCE, "iat": issued}
        claims[resource] = permission.name
        expires = issued + self._ttl_s
        claims["exp"] = expires if renew_until is None else min(expires, int(renew_until))
        if user is not None:
            claims[USER_CLAIM] = user
        if renew_until is not None:
            claims[RENEW_UNTIL_CLAIM] = int(renew_until)
        # headers typ=None: PyJWT then leaves typ out, and the header is exactly {"alg":"HS512"}
        return self._jws.encode(_body(claims), self._key, algorithm=ALGORITHM, headers={"typ": None})


def claim_key_matches(claim_key: str, segment: str) -> bool:
    """Whether a token claim names ``segment`` (a qualified segment name), as Pravega's ``TokenVerifierImpl``.

    ``prn::``, ``/scope:`` and ``stream:`` are removed from the key (``prn::/scope:s/stream:t`` → ``s/t``);
    then it matches the segment equal to it, segments starting with it if it ends with ``/``, segments starting
    with it plus ``/``, and, for ``*``, every segment. (Those parts are removed wherever they occur; Pravega's
    scope and stream names cannot contain ``:``, so they only occur as prefixes.)
    """
    key = _RESOURCE_PARTS.sub("", claim_key)
    return (
        segment == key
        or (key.endswith("/") and segment.startswith(key))
        or segment.startswith(key + "/")
        or key == MASTER_RESOURCE
    )


class TokenVerifier:
    """Checks delegation tokens on a segment store (Pravega's ``TokenVerifierImpl`` with jjwt's parser).

    A token passes :meth:`check` when its HS512 signature verifies with ``key``, its ``exp`` (if any) has not
    passed (``now > exp`` is expired, no clock skew, as jjwt), its ``aud`` is ``segmentstore`` and one of its
    resource claims (any claim but ``sub``, ``aud``, ``iat``, ``exp``) names the segment (see
    :func:`claim_key_matches`) with at least the needed permission. The segment name is the wire's qualified
    name and is not mapped, so a claim on stream ``S/T`` covers:

    - the stream's segments ``S/T/<n>.#epoch.<e>`` and its transaction segments ``S/T/<n>.#epoch.<e>#transaction.<id>``;
    - reader-group and mark streams through their raw stream form: the claim ``prn::/scope:S/stream:_RGx``
      covers ``S/_RGx/...`` and ``prn::/scope:S/stream:_MARKt`` covers ``S/_MARKt/...`` (the controller puts
      the raw form in tokens, whatever resource it authorized);
    - ``_system/...`` segments (and the admin commands' empty segment name) only with the master claim ``*``;
    - table segments of a key-value table ``S/K_kvtable/...`` only through a claim on the stream
      ``prn::/scope:S/stream:K_kvtable``, which is what the Rust client asks for (its tables and reader-group
      state); a ``key-value-table:K`` claim never matches (pravega/pravega#5374, the same here).

    Differences from Pravega, deliberate: only ``HS512`` is accepted (jjwt takes any HS* the header names; every
    Pravega controller signs HS512); the audience is checked (jjwt does not; Pravega's tokens all carry it);
    a claim whose value is not a permission name grants nothing (Java would fail with an internal error when
    its key matched). Tokens without ``exp`` (Pravega's master token) never expire, as in Pravega.
    """

    def __init__(self, key: bytes | str, clock: Callable[[], float] = time.time) -> None:
        self._key = _key_bytes(key)
        self._clock = clock
        self._jws = _jws()

    def check(self, token: str, segment: str, needed: Permission) -> None:
        """Return if ``token`` grants ``needed`` on ``segment``; raise :class:`TokenExpiredError` or
        :class:`TokenInvalidError` (messages name the segment and the reason, never the token or key)."""
        claims = self._valid_claims(token, f"segment {segment}")
        matching = [
            key for key, value in claims.items() if key not in _STANDARD_CLAIMS and claim_key_matches(key, segment)
        ]
        for key in matching:
            granted = Permission.from_name(claims[key]) if isinstance(claims[key], str) else None
            if granted is not None and granted >= needed:
                return
        if matching:
            raise TokenInvalidError(f"token does not grant {needed.name} on segment {segment}")
        raise TokenInvalidError(f"token has no claim for segment {segment} ({needed.name} needed)")

    def grants(self, token: str, what: str = "the controller") -> dict[str, Permission]:
        """The resources a valid token grants and at what permission (``*`` for the master claim); raises
        :class:`TokenExpiredError` or :class:`TokenInvalidError`, naming ``what`` the token was shown to."""
        return _granted(self._valid_claims(token, what))

    def renewal(self, token: str, what: str = "the controller") -> Renewal:
        """What a token shown for renewal grants, to whom, and until when it may be renewed.

        The signature and audience are checked as always; ``exp`` may have passed as long as the token's
        renewal bound has not (``now > renewUntil``: :class:`TokenExpiredError`). A token without the bound is
        renewable only until its own ``exp``; without a user it names nobody (``user`` None)."""
        claims = self._audience_checked(self._verified_claims(token, what), what)
        exp = claims.get("exp")
        bound = claims.get(RENEW_UNTIL_CLAIM, exp)
        if bound is not None and not _is_number(bound):
            raise TokenInvalidError(f"token for {what}: {RENEW_UNTIL_CLAIM} is not a number")
        if bound is not None and self._clock() > bound:
            raise TokenExpiredError(f"token for {what} expired at {exp} and may not be renewed after {bound}")
        user = claims.get(USER_CLAIM)
        return Renewal(_granted(claims), user if isinstance(user, str) else None, None if bound is None else int(bound))

    def _valid_claims(self, token: str, what: str) -> dict[str, Any]:
        """Signature, ``exp`` and audience checked; the claims."""
        claims = self._verified_claims(token, what)
        exp = claims.get("exp")
        if exp is not None:
            if not _is_number(exp):
                raise TokenInvalidError(f"token for {what}: exp is not a number")
            if self._clock() > exp:
                raise TokenExpiredError(f"token for {what} expired at {exp}")
        return self._audience_checked(claims, what)

    @staticmethod
    def _audience_checked(claims: dict[str, Any], what: str) -> dict[str, Any]:
        aud = claims.get("aud")
        if aud != AUDIENCE and not (isinstance(aud, list) and AUDIENCE in aud):
            raise TokenInvalidError(f"token for {what}: audience is not {AUDIENCE}")
        return claims

    def _verified_claims(self, token: str, what: str) -> dict[str, Any]:
        if not token:
            raise TokenInvalidError(f"no delegation token for {what}")
        parts = token.split(".")
        if len(parts) != 3 or not all(_SEGMENT.fullmatch(part) for part in parts):
            raise TokenInvalidError(f"token for {what} is not a signed JWT (three base64url parts)")
        try:
            signature = _b64url_decode(parts[2])
        except binascii.Error:
            raise TokenInvalidError(f"token for {what} has a malformed signature") from None
        if base64url_encode(signature).decode("ascii") != parts[2]:  # no second spelling of one signature
            raise TokenInvalidError(f"token for {what} has a malformed signature")
        try:
            decoded = self._jws.decode_complete(token, self._key, algorithms=[ALGORITHM])
        except InvalidSignatureError:
            raise TokenInvalidError(f"token for {what}: the signature does not match the key") from None
        except InvalidAlgorithmError:
            raise TokenInvalidError(f"token for {what} is not signed with {ALGORITHM}") from None
        except PyJWTError:
            raise TokenInvalidError(f"token for {what} is malformed") from None
        try:
            claims = json.loads(decoded["payload"])
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise TokenInvalidError(f"token for {what}: the body is not JSON") from None
        if not isinstance(claims, dict):
            raise TokenInvalidError(f"token for {what}: the body is not a JSON object")
        return claims


@dataclass(frozen=True, slots=True)
class Renewal:
    """A token shown for renewal (see :meth:`TokenVerifier.renewal`)."""

    grants: dict[str, Permission]
    user: str | None
    renew_until: int | None
    """Epoch s; None: no bound (a token without ``exp``, i.e. Pravega's master token)."""


def _granted(claims: dict[str, Any]) -> dict[str, Permission]:
    granted: dict[str, Permission] = {}
    for key, value in claims.items():
        permission = Permission.from_name(value) if isinstance(value, str) else None
        if key not in _STANDARD_CLAIMS and permission is not None:
            granted[key] = permission
    return granted


def _is_number(value: object) -> bool:
    """A JSON number that is a time: not a bool, not NaN or infinite (Python's json reads those)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def token_expiry(token: str) -> float | None:
    """The token's ``exp`` in epoch seconds, read WITHOUT verifying (for a client deciding when to refresh).

    None for the empty token (authentication off) and for a token without ``exp`` (never expires); a value
    that is not a three-part JWT with a JSON object body raises :class:`TokenInvalidError`.
    """
    if not token:
        return None
    exp = unverified_claims(token).get("exp")
    if exp is None:
        return None
    if not _is_number(exp):
        raise TokenInvalidError("the delegation token's exp is not a number")
    return float(exp)


def renew_at(token: str, before_s: float) -> float | None:
    """When a client should get a fresh token: ``before_s`` before ``exp``, or a quarter of the token's
    lifetime (``exp - iat``) before it if that is shorter; None for a token that never expires (or "").
    Read WITHOUT verifying; raises :class:`TokenInvalidError` like :func:`token_expiry`."""
    exp = token_expiry(token)
    if exp is None:
        return None
    iat = unverified_claims(token).get("iat")
    lifetime = exp - float(iat) if isinstance(iat, int | float) and _is_number(iat) and iat <= exp else before_s * 4
    return exp - min(before_s, lifetime / 4)


def unverified_claims(token: str) -> dict[str, Any]:
    """The token's claims read WITHOUT verifying (only a segment store or controller can): for a client
    deciding when and how to renew it. Raises :class:`TokenInvalidError` for what is not a JWT with a JSON
    object body."""
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenInvalidError("the delegation token is not a JWT (three parts)")
    try:
        claims = json.loads(_b64url_decode(parts[1]))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise TokenInvalidError("the delegation token's body is not base64url JSON") from None
    if not isinstance(claims, dict):
        raise TokenInvalidError("the delegation token's body is not a JSON object")
    return claims


def stream_grant(token: str) -> tuple[str, str, Permission] | None:
    """``(scope, stream, permission)`` when the token (read WITHOUT verifying) grants exactly one stream, as
    ``getDelegationToken`` answers; None for any other token."""
    granted = _granted(unverified_claims(token))
    if len(granted) != 1:
        return None
    ((resource, permission),) = granted.items()
    match = _STREAM_RESOURCE.fullmatch(resource)
    return (match["scope"], match["stream"], permission) if match else None
