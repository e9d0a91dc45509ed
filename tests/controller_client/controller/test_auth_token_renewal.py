"""Renewable delegation tokens: the claims the signer adds (user, renewal bound), what the verifier accepts for
renewal and what it never accepts, and the client side that renews a token before it expires
(``segstore_shared.auth.tokens``, ``controller_client.controller.bearer``)."""

from __future__ import annotations

import asyncio
import base64
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller_client.controller.bearer import BearerToken
from controller_client.errors import ControllerAuthenticationError
from controller_client.proto import Controller_pb2 as pb
from segstore_shared.auth.acl import Permission, raw_stream
from segstore_shared.auth.tokens import (
    RENEW_UNTIL_CLAIM,
    USER_CLAIM,
    TokenExpiredError,
    TokenInvalidError,
    TokenSigner,
    TokenVerifier,
    renew_at,
    stream_grant,
    unverified_claims,
)

pytestmark = pytest.mark.unit

KEY = "renewal-test-key"
T0 = 1_700_000_000
DAY = 86_400
SEGMENT = "s/t/0.#epoch.0"
RUST_EXP = re.compile(r'"exp":\s?(?P<body>\d+)')


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def renewable(user: str = "alice", bound: int = T0 + DAY, ttl_s: int = 600, now: float = T0) -> str:
    return TokenSigner(KEY, ttl_s, Clock(now)).sign(
        raw_stream("s", "t"), Permission.READ_UPDATE, user=user, renew_until=bound
    )


def test_a_renewable_token_names_its_user_and_bound_after_exp() -> None:
    claims = unverified_claims(renewable())
    assert list(claims) == ["sub", "aud", "iat", "prn::/scope:s/stream:t", "exp", USER_CLAIM, RENEW_UNTIL_CLAIM]
    assert claims["exp"] == T0 + 600 and claims[USER_CLAIM] == "alice" and claims[RENEW_UNTIL_CLAIM] == T0 + DAY


def test_a_token_never_expires_after_its_renewal_bound() -> None:
    assert unverified_claims(renewable(bound=T0 + 10))["exp"] == T0 + 10


@given(st.text(min_size=1, max_size=20))
def test_any_user_name_keeps_the_body_readable_by_the_rust_client(user: str) -> None:
    body = renewable(user=user).split(".")[1]
    assert "-" not in body and "_" not in body
    decoded = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    match = RUST_EXP.search(decoded.decode("ascii"))
    assert match is not None and int(match["body"]) == T0 + 600
    assert json.loads(decoded)[USER_CLAIM] == user


def test_the_segment_store_refuses_a_renewable_token_after_its_exp() -> None:
    token = renewable()
    TokenVerifier(KEY, Clock(T0 + 600)).check(token, SEGMENT, Permission.READ_UPDATE)
    with pytest.raises(TokenExpiredError):
        TokenVerifier(KEY, Clock(T0 + 601)).check(token, SEGMENT, Permission.READ)
    assert TokenVerifier(KEY, Clock(T0)).grants(token) == {"prn::/scope:s/stream:t": Permission.READ_UPDATE}


def test_renewal_accepts_an_expired_token_until_its_bound_only() -> None:
    token = renewable()
    renewal = TokenVerifier(KEY, Clock(T0 + DAY)).renewal(token)
    assert renewal.grants == {"prn::/scope:s/stream:t": Permission.READ_UPDATE}
    assert (renewal.user, renewal.renew_until) == ("alice", T0 + DAY)
    with pytest.raises(TokenExpiredError, match="may not be renewed after"):
        TokenVerifier(KEY, Clock(T0 + DAY + 1)).renewal(token)


def test_a_token_without_a_bound_is_renewable_until_its_exp() -> None:
    token = TokenSigner(KEY, 600, Clock()).sign(raw_stream("s", "t"), Permission.READ)
    renewal = TokenVerifier(KEY, Clock(T0 + 600)).renewal(token)
    assert (renewal.user, renewal.renew_until) == (None, T0 + 600)
    with pytest.raises(TokenExpiredError):
        TokenVerifier(KEY, Clock(T0 + 601)).renewal(token)


def test_renewal_checks_the_signature_and_audience() -> None:
    with pytest.raises(TokenInvalidError, match="signature"):
        TokenVerifier("another-key", Clock()).renewal(renewable())
    header, body, signature = renewable().split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims[RENEW_UNTIL_CLAIM] = T0 + 365 * DAY  # a longer bound, without the key
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    with pytest.raises(TokenInvalidError):
        TokenVerifier(KEY, Clock()).renewal(f"{header}.{forged}.{signature}")
    for garbage in ("", "a.b.c", "x" * 40):
        with pytest.raises(TokenInvalidError):
            TokenVerifier(KEY, Clock()).renewal(garbage)


def test_stream_grant_reads_the_one_stream_of_a_delegation_token() -> None:
    signer = TokenSigner(KEY, 600, Clock())
    assert stream_grant(renewable()) == ("s", "t", Permission.READ_UPDATE)
    assert stream_grant(signer.sign(raw_stream("a", "_RGg"), Permission.READ)) == ("a", "_RGg", Permission.READ)
    assert stream_grant(signer.sign_master()) is None
    assert stream_grant(signer.sign("prn::/scope:s", Permission.READ)) is None
    with pytest.raises(TokenInvalidError):
        stream_grant("not-a-token")


def test_renew_at_is_before_exp_by_the_margin_or_a_quarter_of_the_lifetime() -> None:
    assert renew_at(renewable(ttl_s=600), 30) == T0 + 570
    assert renew_at(renewable(ttl_s=8), 30) == T0 + 6
    assert renew_at(TokenSigner(KEY, 1, Clock()).sign_master(), 5) == T0 + 0.75
    assert renew_at("", 5) is None


# --- the client side ----------------------------------------------------------------------------------------------


class Exchange:
    """A controller answering renewals: a new token each time, or a refusal."""

    def __init__(self, clock: Clock, refuse: bool = False) -> None:
        self.clock = clock
        self.refuse = refuse
        self.calls: list[tuple[pb.StreamInfo, tuple[tuple[str, str], ...]]] = []

    async def __call__(self, request: pb.StreamInfo, metadata: object) -> str:
        self.calls.append((request, tuple(metadata)))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # a real exchange yields: other tasks run meanwhile
        if self.refuse:
            raise ControllerAuthenticationError("getDelegationToken: Authentication failed: expired")
        return renewable(now=self.clock.now)


def test_bearer_is_due_before_its_exp_and_asks_for_its_own_stream() -> None:
    clock = Clock()
    bearer = BearerToken(renewable(), renew_before_s=30, clock=clock)
    assert bearer.renewable and not bearer.due()
    clock.now = T0 + 570
    assert bearer.due()
    request = bearer.renewal_request()
    assert (request.scope, request.stream, request.accessOperation) == ("s", "t", pb.StreamInfo.READ_WRITE)
    read = BearerToken(TokenSigner(KEY, 600, Clock()).sign(raw_stream("s", "t"), Permission.READ), clock=clock)
    assert read.renewal_request().accessOperation == pb.StreamInfo.READ


def test_bearer_that_grants_no_single_stream_is_never_renewed() -> None:
    for token in ("opaque-keycloak-token", TokenSigner(KEY, 1, Clock()).sign_master()):
        bearer = BearerToken(token, clock=Clock(T0 + 10**6))
        assert not bearer.renewable and not bearer.due()
        assert bearer.metadata() == (("authorization", f"Bearer {token}"),)


async def test_concurrent_renewals_exchange_once_with_the_old_token() -> None:
    clock = Clock(T0 + 700)
    old = renewable()
    bearer = BearerToken(old, clock=clock)
    exchange = Exchange(clock)
    await asyncio.gather(*(bearer.renew_if_due(exchange) for _ in range(5)))
    assert len(exchange.calls) == 1 and bearer.renewals == 1
    assert exchange.calls[0][1] == (("authorization", f"Bearer {old}"),)
    assert bearer.token != old and not bearer.due()


async def test_a_refused_renewal_says_the_token_could_not_be_renewed() -> None:
    clock = Clock(T0 + 700)
    bearer = BearerToken(renewable(), clock=clock)
    with pytest.raises(ControllerAuthenticationError, match="the token could not be renewed"):
        await bearer.renew_if_due(Exchange(clock, refuse=True))
    assert bearer.renewals == 0
