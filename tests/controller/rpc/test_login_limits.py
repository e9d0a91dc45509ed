"""The token buckets that limit password checks per user and per peer address (manual clock), and the
controller's password checks off its event loop: shared when concurrent, bounded, refused when a bucket is
empty."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_fixtures import write_password_file

from controller.config import AuthConfig
from controller.rpc.authentication import AuthenticationError, ControllerAuth, LoginBusyError
from controller.rpc.login_limits import LoginLimits, peer_address
from segstore_shared.auth.acl import Acl
from segstore_shared.auth.passwords import PasswordFile, basic_header

pytestmark = pytest.mark.unit


def test_take_with_a_full_bucket_then_refused_until_it_refills() -> None:
    now = [0.0]
    limits = LoginLimits(burst=3, per_s=0.5, clock=lambda: now[0])
    assert [limits.take(["user:u"]) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limits.take(["user:u"]) == pytest.approx(2.0)  # one token back in 1 / 0.5 s
    now[0] += 1.0
    assert limits.take(["user:u"]) == pytest.approx(1.0)
    now[0] += 1.0
    assert limits.take(["user:u"]) == 0.0
    assert limits.take(["user:other"]) == 0.0  # keys are apart


def test_take_with_one_empty_key_takes_from_none() -> None:
    now = [0.0]
    limits = LoginLimits(burst=2, per_s=1.0, clock=lambda: now[0])
    limits.take(["peer:ipv4:10.0.0.1"])
    limits.take(["peer:ipv4:10.0.0.1"])
    assert limits.take(["user:a", "peer:ipv4:10.0.0.1"]) == pytest.approx(1.0)
    assert limits.take(["user:a"]) == 0.0 and limits.take(["user:a"]) == 0.0  # user:a's tokens were all left
    assert limits.take(["user:a"]) > 0


def test_give_back_with_a_successful_check_costs_nothing() -> None:
    limits = LoginLimits(burst=1, per_s=0.001, clock=lambda: 0.0)
    for _ in range(5):
        assert limits.take(["user:u", "peer:p"]) == 0.0
        limits.give_back(["user:u", "peer:p"])


def test_keys_with_many_names_are_bounded() -> None:
    limits = LoginLimits(burst=1, per_s=0.001, clock=lambda: 0.0, max_keys=10)
    for i in range(100):
        limits.take([f"user:{i}"])
    assert len(limits._buckets) == 10
    assert limits.take(["user:99"]) > 0 and limits.take(["user:0"]) == 0.0  # the oldest forgotten


def test_new_limits_with_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="burst"):
        LoginLimits(burst=0, per_s=1.0)
    with pytest.raises(ValueError, match="per_s"):
        LoginLimits(burst=1, per_s=0.0)


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:51234", "ipv4:127.0.0.1"),
        ("ipv6:[::1]:51234", "ipv6:[::1]"),
        ("ipv6:%5B::1%5D:51234", "ipv6:%5B::1%5D:51234"),  # not the form gRPC writes: kept whole
        ("unix:/tmp/socket", "unix:/tmp/socket"),
        ("", ""),
    ],
)
def test_peer_address_drops_the_port(peer: str, address: str) -> None:
    assert peer_address(peer) == address


class HeldPasswords:
    """A password file whose checks wait until released (wraps the real one): a check is running for as long
    as a test needs."""

    def __init__(self, passwords: PasswordFile) -> None:
        self.passwords = passwords
        self.entered = threading.Event()
        self.release = threading.Event()
        self.checks = 0

    def authenticate(self, user: str, password: str) -> Acl | None:
        self.checks += 1
        self.entered.set()
        self.release.wait()
        return self.passwords.authenticate(user, password)


@pytest.fixture
def auth(tmp_path: Path) -> Iterator[ControllerAuth]:
    path = write_password_file(tmp_path / "passwd", {"u": ("pw", "prn::*,READ"), "v": ("pw", "prn::*,READ")})
    config = AuthConfig(path, "key", login_queue=1, login_failures_burst=2)
    controller_auth = ControllerAuth(config, limits_clock=lambda: 0.0)  # the buckets never refill
    yield controller_auth
    controller_auth.close()


def _basic(user: str, password: str) -> list[tuple[str, str]]:
    return [("authorization", basic_header(user, password))]


async def test_authenticate_with_one_header_twice_at_once_checks_it_once_and_a_full_queue_is_busy(
    auth: ControllerAuth,
) -> None:
    held = HeldPasswords(auth._passwords)
    auth._passwords = held  # type: ignore[assignment]
    first = asyncio.create_task(auth.authenticate(_basic("u", "pw"), "listScopes", "ipv4:10.0.0.1:1"))
    await asyncio.to_thread(held.entered.wait)  # the check runs, in its thread
    second = asyncio.create_task(auth.authenticate(_basic("u", "pw"), "listScopes", "ipv4:10.0.0.2:1"))
    with pytest.raises(LoginBusyError, match="1 logins are being checked"):
        await auth.authenticate(_basic("v", "pw"), "listScopes", "ipv4:10.0.0.3:1")
    held.release.set()
    callers = await asyncio.gather(first, second)
    assert [c.user for c in callers if c is not None] == ["u", "u"] and held.checks == 1


async def test_authenticate_with_failures_refuses_the_user_and_the_address_before_checking(
    auth: ControllerAuth,
) -> None:
    for attempt in ("bad1", "bad2"):
        with pytest.raises(AuthenticationError, match=r"^Authentication failed for user 'u'$"):
            await auth.authenticate(_basic("u", attempt), "listScopes", "ipv4:10.0.0.1:1")
    with pytest.raises(AuthenticationError, match=r"too many failed logins .* retry in 1 s"):
        await auth.authenticate(_basic("u", "pw"), "listScopes", "ipv4:10.0.0.9:1")  # the user's bucket
    with pytest.raises(AuthenticationError, match="user 'v': too many failed logins"):
        await auth.authenticate(_basic("v", "pw"), "listScopes", "ipv4:10.0.0.1:2")  # the address's bucket
    who = await auth.authenticate(_basic("v", "pw"), "listScopes", "ipv4:10.0.0.2:1")  # elsewhere: checked
    assert who is not None and who.user == "v"
