"""Delegation tokens as Pravega's controller writes and its segment stores check them (segstore_shared.auth.tokens).

Manual clock throughout; PyJWT's own ``jwt.decode`` and a hand-made HMAC serve as independent readers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re

import jwt
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from segstore_shared.auth.acl import Permission, raw_stream, scope
from segstore_shared.auth.tokens import (
    TokenError,
    TokenExpiredError,
    TokenInvalidError,
    TokenSigner,
    TokenVerifier,
    claim_key_matches,
    token_expiry,
)
from segstore_shared.errors import SegstoreError

pytestmark = pytest.mark.unit

KEY = "k3y-for-tests"
OTHER_KEY = "an0ther-k3y"
LONG_KEY = "x" * 64  # long enough that PyJWT's own decode does not warn
T0 = 1_700_000_000
# the Rust client's reading of exp (pravega-client-rust auth/src/lib.rs)
RUST_EXP = re.compile(r'"exp":\s?(?P<body>\d+)')
STANDARD_CLAIMS = {"sub", "aud", "iat", "exp"}
# Pravega's names never contain ':' (so never prn::, /scope:, stream:, which the verifier strips) nor '/'
NAME = st.text(alphabet=st.characters(codec="ascii", exclude_characters="/:"), min_size=1, max_size=12)


class ManualClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _signer(key: str = KEY, ttl_s: int = 600, clock: ManualClock | None = None) -> TokenSigner:
    return TokenSigner(key, ttl_s, clock or ManualClock())


def _verifier(clock: ManualClock | None = None, key: str = KEY) -> TokenVerifier:
    return TokenVerifier(key, clock or ManualClock())


def _standard_b64decode(part: str) -> bytes:
    """What the Rust client does (base64 0.12 STANDARD, which accepts missing padding)."""
    return base64.b64decode(part + "=" * (-len(part) % 4), validate=True)


def _body(token: str) -> bytes:
    return _standard_b64decode(token.split(".")[1])


def _forge(header: dict[str, object], claims: dict[str, object], key: str = KEY, alg: str = "sha512") -> str:
    """A token made by hand: any header, any claims, HMAC with ``alg``."""

    def enc(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    signing_input = f"{enc(json.dumps(header).encode())}.{enc(json.dumps(claims).encode())}"
    signature = hmac.new(key.encode(), signing_input.encode(), getattr(hashlib, alg)).digest()
    return f"{signing_input}.{enc(signature)}"


# --- what the signer writes ---------------------------------------------------------------------------------------


def test_sign_with_pravega_header_and_body_layout() -> None:
    token = _signer().sign(raw_stream("s", "t"), Permission.READ_UPDATE)
    header, body, signature = token.split(".")
    assert header == "eyJhbGciOiJIUzUxMiJ9"  # {"alg":"HS512"}, no typ, as jjwt 0.9.1 writes it
    assert base64.urlsafe_b64decode(header + "==") == b'{"alg":"HS512"}'
    assert _body(token) == (
        b'{"sub":"segmentstoreresource","aud":"segmentstore","iat":1700000000,'
        b'"prn::/scope:s/stream:t":"READ_UPDATE","exp":1700000600}'
    )
    expected = hmac.new(KEY.encode(), f"{header}.{body}".encode(), hashlib.sha512).digest()
    assert signature == base64.urlsafe_b64encode(expected).decode().rstrip("=")
    assert "=" not in token


def test_sign_with_pyjwt_as_independent_reader() -> None:
    token = _signer(key=LONG_KEY).sign(raw_stream("s", "t"), Permission.READ)
    claims = jwt.decode(token, LONG_KEY, algorithms=["HS512"], audience="segmentstore", options={"verify_exp": False})
    assert claims == {
        "sub": "segmentstoreresource",
        "aud": "segmentstore",
        "iat": T0,
        "prn::/scope:s/stream:t": "READ",
        "exp": T0 + 600,
    }
    assert jwt.get_unverified_header(token) == {"alg": "HS512"}


def test_sign_master_with_star_claim_and_exp() -> None:
    token = _signer(ttl_s=30).sign_master()
    assert json.loads(_body(token)) == {
        "sub": "segmentstoreresource",
        "aud": "segmentstore",
        "iat": T0,
        "*": "READ_UPDATE",
        "exp": T0 + 30,
    }
    verifier = _verifier()
    for segment in ("_system/_requeststream/0.#epoch.0", "s/t/0.#epoch.0", ""):
        verifier.check(token, segment, Permission.READ_UPDATE)


def test_sign_with_bad_arguments_rejected() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        TokenSigner(KEY, ttl_s=-1)
    with pytest.raises(ValueError, match="key"):
        TokenSigner("")
    with pytest.raises(ValueError, match="key"):
        TokenVerifier(b"")
    for resource in ("", "exp", "iat", "sub", "aud"):
        with pytest.raises(ValueError, match="resource"):
            _signer().sign(resource, Permission.READ)


def test_sign_with_bytes_key_same_as_utf8_text() -> None:
    text = _signer(key="clé").sign("prn::/", Permission.READ)
    raw = TokenSigner("clé".encode(), 600, ManualClock()).sign("prn::/", Permission.READ)
    assert text == raw


DANGEROUS_ASCII = b">?~\x7f"  # the ASCII bytes whose low six bits are 62 or 63


def test_base64_with_safe_ascii_bytes_never_gives_dash_or_underscore() -> None:
    """Exhaustive: every 3-byte group (and the 1- and 2-byte ends) of ASCII bytes other than > ? ~ DEL."""
    safe = bytes(b for b in range(0x80) if b not in DANGEROUS_ASCII)
    triples = b"".join(bytes((a, b, c)) for a in safe for b in safe for c in safe)
    ends = [bytes((a,)) for a in safe] + [bytes((a, b)) for a in safe for b in safe]
    for data in (triples, *ends):
        encoded = base64.urlsafe_b64encode(data)
        assert b"-" not in encoded and b"_" not in encoded
    for byte in DANGEROUS_ASCII:  # and each dangerous byte does give one in the third place of a group
        assert base64.urlsafe_b64encode(bytes((0x41, 0x41, byte))).decode()[-1] in "-_"


@pytest.mark.parametrize("name", ["~~~~~~", ">>>>>>", "??????", "\x7f\x7f\x7f", "ééé", "🎉🎉", "a~b>c?d", '"exp":1'])
def test_sign_with_dangerous_characters_body_is_standard_base64(name: str) -> None:
    resource = raw_stream(name, name)
    token = _signer().sign(resource, Permission.READ_UPDATE)
    body = token.split(".")[1]
    assert "-" not in body and "_" not in body
    assert json.loads(_body(token))[resource] == "READ_UPDATE"
    match = RUST_EXP.search(_body(token).decode("ascii"))
    assert match is not None and int(match["body"]) == T0 + 600


@settings(max_examples=500)
@given(resource=st.text(min_size=1, max_size=60), ttl=st.integers(0, 10**6), now=st.integers(0, 4_000_000_000))
def test_sign_with_random_resources_rust_client_reads_exp(resource: str, ttl: int, now: int) -> None:
    assume(resource not in STANDARD_CLAIMS)
    token = _signer(ttl_s=ttl, clock=ManualClock(now)).sign(resource, Permission.READ)
    parts = token.split(".")
    assert len(parts) == 3
    assert not set(parts[1]) & {"-", "_"}
    decoded = _body(token)  # STANDARD alphabet, as the Rust client decodes it
    assert max(decoded) < 0x80 and not set(decoded) & set(DANGEROUS_ASCII)
    match = RUST_EXP.search(decoded.decode("ascii"))
    assert match is not None and int(match["body"]) == now + ttl
    assert json.loads(decoded) == {"sub": "segmentstoreresource", "aud": "segmentstore", "iat": now, resource: "READ",
                                   "exp": now + ttl}  # fmt: skip
    assert token_expiry(token) == now + ttl


@settings(max_examples=200)
@given(scope_name=NAME, stream_name=NAME, epoch=st.integers(0, 99))
def test_check_with_random_stream_names_passes_own_segments(scope_name: str, stream_name: str, epoch: int) -> None:
    token = _signer().sign(raw_stream(scope_name, stream_name), Permission.READ_UPDATE)
    _verifier().check(token, f"{scope_name}/{stream_name}/3.#epoch.{epoch}", Permission.READ_UPDATE)


# --- what the verifier accepts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claim", "segment", "matches"),
    [
        ("prn::/scope:s/stream:t", "s/t/0.#epoch.0", True),
        ("prn::/scope:s/stream:t", "s/t/1.#epoch.2#transaction.00000000000000000000000000000001", True),
        ("prn::/scope:s/stream:t", "s/t", True),
        ("prn::/scope:s/stream:t", "s/tt/0.#epoch.0", False),
        ("prn::/scope:s/stream:t", "s/t2/0.#epoch.0", False),
        ("prn::/scope:s/stream:t", "x/t/0.#epoch.0", False),
        ("prn::/scope:s/stream:_RGrg", "s/_RGrg/0.#epoch.0", True),
        ("prn::/scope:s/stream:_MARKt", "s/_MARKt/0.#epoch.0", True),
        ("prn::/scope:s/stream:_MARKt", "s/t/0.#epoch.0", False),
        ("prn::/scope:s/reader-group:rg", "s/_RGrg/0.#epoch.0", False),
        ("prn::/scope:s/stream:rg_kvtable", "s/rg_kvtable/0.#epoch.0", True),
        ("prn::/scope:s/key-value-table:k", "s/k_kvtable/0.#epoch.0", False),  # pravega/pravega#5374
        ("prn::/scope:s/stream:k", "s/k_kvtable/0.#epoch.0", False),
        ("prn::/scope:s", "s/t/0.#epoch.0", True),
        ("prn::/scope:s", "_system/_requeststream/0.#epoch.0", False),
        ("prn::/scope:_system/stream:x", "_system/_requeststream/0.#epoch.0", False),
        ("*", "_system/_requeststream/0.#epoch.0", True),
        ("prn::*", "_system/containers/metadata_0", True),
        ("*", "", True),
        ("prn::/scope:s", "", False),
        ("abc/", "abc/xyz", True),
        ("abc/", "abcd/xyz", False),
    ],
)
def test_claim_key_matches_with_pravega_rules(claim: str, segment: str, matches: bool) -> None:
    assert claim_key_matches(claim, segment) is matches


def test_check_with_permissions_read_and_read_update() -> None:
    signer, verifier = _signer(), _verifier()
    read = signer.sign(raw_stream("s", "t"), Permission.READ)
    write = signer.sign(raw_stream("s", "t"), Permission.READ_UPDATE)
    none = signer.sign(raw_stream("s", "t"), Permission.NONE)
    verifier.check(read, "s/t/0.#epoch.0", Permission.READ)
    verifier.check(write, "s/t/0.#epoch.0", Permission.READ)
    verifier.check(write, "s/t/0.#epoch.0", Permission.READ_UPDATE)
    verifier.check(none, "s/t/0.#epoch.0", Permission.NONE)
    with pytest.raises(TokenInvalidError, match=r"does not grant READ_UPDATE on segment s/t/0\.#epoch\.0"):
        verifier.check(read, "s/t/0.#epoch.0", Permission.READ_UPDATE)
    with pytest.raises(TokenInvalidError, match="does not grant READ"):
        verifier.check(none, "s/t/0.#epoch.0", Permission.READ)


def test_check_with_scope_claim_covers_its_segments() -> None:
    token = _signer().sign(scope("s"), Permission.READ)
    _verifier().check(token, "s/anything/0.#epoch.0", Permission.READ)


def test_check_with_wrong_stream_names_segment() -> None:
    token = _signer().sign(raw_stream("s", "t"), Permission.READ_UPDATE)
    with pytest.raises(TokenInvalidError, match=r"no claim for segment s/u/0\.#epoch\.0 \(READ needed\)"):
        _verifier().check(token, "s/u/0.#epoch.0", Permission.READ)


def test_check_with_expiry_at_and_after_exp() -> None:
    clock = ManualClock()
    token = _signer(ttl_s=600, clock=ManualClock()).sign(raw_stream("s", "t"), Permission.READ)
    verifier = _verifier(clock)
    clock.now = T0 + 600  # jjwt: expired only when now is after exp
    verifier.check(token, "s/t/0.#epoch.0", Permission.READ)
    clock.now = T0 + 600.001
    with pytest.raises(TokenExpiredError, match=r"token for segment s/t/0\.#epoch\.0 expired at 1700000600"):
        verifier.check(token, "s/t/0.#epoch.0", Permission.READ)
    clock.now = T0 + 601
    with pytest.raises(TokenExpiredError) as info:
        verifier.check(token, "s/t/0.#epoch.0", Permission.READ)
    assert info.value.retriable and isinstance(info.value, TokenError) and isinstance(info.value, SegstoreError)


def test_check_with_zero_ttl_valid_within_its_second() -> None:
    token = _signer(ttl_s=0).sign(raw_stream("s", "t"), Permission.READ)
    _verifier(ManualClock(T0)).check(token, "s/t/0.#epoch.0", Permission.READ)
    with pytest.raises(TokenExpiredError):
        _verifier(ManualClock(T0 + 1)).check(token, "s/t/0.#epoch.0", Permission.READ)


def test_check_with_pravega_master_token_without_exp_never_expires() -> None:
    claims = {"sub": "segmentstoreresource", "aud": "segmentstore", "iat": T0, "*": "READ_UPDATE"}
    token = _forge({"alg": "HS512"}, claims)
    _verifier(ManualClock(T0 + 10**9)).check(token, "_system/_requeststream/0.#epoch.0", Permission.READ_UPDATE)
    assert token_expiry(token) is None


def test_check_with_pyjwt_token_with_typ_header_accepted() -> None:
    claims = {"sub": "segmentstoreresource", "aud": "segmentstore", "iat": T0, "s": "READ", "exp": T0 + 5}
    token = jwt.encode(claims, LONG_KEY, algorithm="HS512")
    assert jwt.get_unverified_header(token) == {"alg": "HS512", "typ": "JWT"}
    _verifier(key=LONG_KEY).check(token, "s/t/0.#epoch.0", Permission.READ)


# --- what the verifier rejects ------------------------------------------------------------------------------------

VALID_CLAIMS: dict[str, object] = {
    "sub": "segmentstoreresource",
    "aud": "segmentstore",
    "iat": T0,
    "prn::/scope:s/stream:t": "READ_UPDATE",
    "exp": T0 + 600,
}


def _rejected(token: str, reason: str, segment: str = "s/t/0.#epoch.0") -> None:
    with pytest.raises(TokenInvalidError) as info:
        _verifier().check(token, segment, Permission.READ)
    message = str(info.value)
    assert re.search(reason, message), message
    assert segment in message
    assert KEY not in message and (not token or token not in message)
    for part in token.split("."):
        assert len(part) < 8 or part not in message


def test_check_with_forged_valid_token_passes() -> None:
    _verifier().check(_forge({"alg": "HS512"}, VALID_CLAIMS), "s/t/0.#epoch.0", Permission.READ_UPDATE)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "no delegation token"),
        ("garbage", "not a signed JWT"),
        ("a.b", "not a signed JWT"),
        ("a.b.c.d", "not a signed JWT"),
        ("a..c", "not a signed JWT"),
        ("eyJhbGciOiJIUzUxMiJ9.e30.!!!!", "not a signed JWT"),
        ("eyJhbGciOiJIUzUxMiJ9.e30.x", "malformed signature"),
        ("eyJhbGciOiJIUzUxMiJ9.e30.AAAA", "the signature does not match"),
        ("bm90IGpzb24.e30.AAAA", "is malformed"),
    ],
)
def test_check_with_malformed_token_rejected(token: str, reason: str) -> None:
    _rejected(token, reason)


def test_check_with_other_key_rejected() -> None:
    _rejected(_signer(key=OTHER_KEY).sign(raw_stream("s", "t"), Permission.READ_UPDATE), "does not match the key")


def test_check_with_other_algorithms_rejected() -> None:
    _rejected(_forge({"alg": "HS256"}, VALID_CLAIMS, alg="sha256"), "not signed with HS512")
    _rejected(_forge({"alg": "none"}, VALID_CLAIMS), "not signed with HS512")
    unsigned = jwt.encode(VALID_CLAIMS, None, algorithm="none")
    _rejected(unsigned, "not a signed JWT")  # an empty signature part


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"aud": "controller"}, "audience is not segmentstore"),
        ({"aud": None}, "audience is not segmentstore"),
        ({"exp": "soon"}, "exp is not a number"),
        ({"exp": True}, "exp is not a number"),
        ({"prn::/scope:s/stream:t": "read"}, "does not grant READ"),
        ({"prn::/scope:s/stream:t": 2}, "does not grant READ"),
    ],
)
def test_check_with_bad_claims_rejected(change: dict[str, object], reason: str) -> None:
    claims = {**VALID_CLAIMS, **change}
    _rejected(_forge({"alg": "HS512"}, {k: v for k, v in claims.items() if v is not None}), reason)


def test_check_with_audience_list_accepted() -> None:
    token = _forge({"alg": "HS512"}, {**VALID_CLAIMS, "aud": ["x", "segmentstore"]})
    _verifier().check(token, "s/t/0.#epoch.0", Permission.READ)


def test_check_with_non_object_body_rejected() -> None:
    enc = base64.urlsafe_b64encode
    for body in (b"[1]", b"not json", b"\xff\xfe"):
        signing_input = f"eyJhbGciOiJIUzUxMiJ9.{enc(body).decode().rstrip('=')}"
        signature = hmac.new(KEY.encode(), signing_input.encode(), hashlib.sha512).digest()
        _rejected(f"{signing_input}.{enc(signature).decode().rstrip('=')}", "the body is not")


def test_check_with_tampered_body_rejected() -> None:
    token = _signer().sign(raw_stream("s", "t"), Permission.READ)
    header, _, signature = token.split(".")
    forged_body = base64.urlsafe_b64encode(json.dumps({**VALID_CLAIMS, "prn::/scope:s/stream:t": "READ_UPDATE"})
                                           .encode()).decode().rstrip("=")  # fmt: skip
    _rejected(f"{header}.{forged_body}.{signature}", "does not match the key")


def test_check_with_second_spelling_of_signature_rejected() -> None:
    token = _signer().sign(raw_stream("s", "t"), Permission.READ)
    head, last = token[:-1], token[-1]
    # 64 bytes → 86 characters: the last one carries 2 unused bits; another spelling decodes to the same bytes
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = alphabet[alphabet.index(last) ^ 1]
    assert base64.urlsafe_b64decode(token.split(".")[2][:-1] + twin + "==") == base64.urlsafe_b64decode(
        token.split(".")[2] + "=="
    )
    _rejected(head + twin, "malformed signature")


# --- fuzz: nothing but a valid token for that segment and permission passes -------------------------------------


@settings(max_examples=400)
@given(st.text(max_size=200))
def test_check_with_garbage_never_passes(token: str) -> None:
    with pytest.raises(TokenInvalidError):
        _verifier().check(token, "s/t/0.#epoch.0", Permission.READ)


@settings(max_examples=300)
@given(data=st.data())
def test_check_with_truncated_or_altered_token_never_passes(data: st.DataObject) -> None:
    token = _signer().sign(raw_stream("s", "t"), Permission.READ_UPDATE)
    cut = data.draw(st.integers(0, len(token) - 1), label="cut")
    with pytest.raises(TokenInvalidError):
        _verifier().check(token[:cut], "s/t/0.#epoch.0", Permission.READ)
    position = data.draw(st.integers(0, len(token) - 1), label="position")
    replacement = data.draw(st.characters(codec="ascii").filter(lambda c: c != token[position]), label="char")
    altered = token[:position] + replacement + token[position + 1 :]
    with pytest.raises(TokenInvalidError):
        _verifier().check(altered, "s/t/0.#epoch.0", Permission.READ)


@settings(max_examples=200)
@given(
    scope_name=NAME,
    stream_name=NAME,
    other=NAME,
    granted=st.sampled_from(list(Permission)),
    needed=st.sampled_from(list(Permission)),
    late=st.floats(0.001, 10**6),
)
def test_check_with_wrong_stream_permission_key_or_time_never_passes(
    scope_name: str, stream_name: str, other: str, granted: Permission, needed: Permission, late: float
) -> None:
    assume(other != stream_name and not other.startswith(stream_name + "/"))
    clock = ManualClock()
    token = _signer(clock=clock).sign(raw_stream(scope_name, stream_name), granted)
    segment = f"{scope_name}/{stream_name}/0.#epoch.0"
    verifier = _verifier(clock)
    if granted >= needed:
        verifier.check(token, segment, needed)
    else:
        with pytest.raises(TokenInvalidError):
            verifier.check(token, segment, needed)
    with pytest.raises(TokenInvalidError):
        verifier.check(token, f"{scope_name}/{other}/0.#epoch.0", Permission.NONE)
    with pytest.raises(TokenInvalidError):
        _verifier(clock, key=OTHER_KEY).check(token, segment, Permission.NONE)
    clock.now = T0 + 600 + late
    with pytest.raises(TokenExpiredError):
        verifier.check(token, segment, Permission.NONE)


# --- token_expiry -------------------------------------------------------------------------------------------------


def test_token_expiry_with_tokens_and_non_tokens() -> None:
    assert token_expiry(_signer(ttl_s=42).sign("prn::/", Permission.READ)) == T0 + 42
    assert token_expiry(_signer(key=OTHER_KEY, ttl_s=1).sign_master()) == T0 + 1  # no key needed
    assert token_expiry("") is None
    string_exp = base64.b64encode(b'{"exp":"x"}').decode()
    for bad in ("garbage", "a.b", "a.!!!!.c", "a.W10.c", f"a.{string_exp}.c"):
        with pytest.raises(TokenInvalidError):
            token_expiry(bad)
