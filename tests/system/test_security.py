"""A standalone with authentication on, as users meet it: `segstore auth add-user` writes the password file,
`segstore standalone --auth-password-file` enforces it. Our client with the right user writes and reads, a
reader of scope ``a`` can read ``a`` but neither write to it nor read ``b``, a wrong password is refused, and a
raw wire client without a token is refused by the segment store itself."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import pytest
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager
from controller_client.controller.channel import ControllerClientConfig
from controller_client.errors import ControllerAuthenticationError, ControllerPermissionError
from segment_store.client import AuthTokenCheckFailedError, SegmentClient
from segstore_cli.main import main

pytestmark = pytest.mark.integration

USERS = {
    "admin": ("admin-secret", "prn::*,READ_UPDATE"),
    "reader": ("reader-secret", "prn::/,READ;prn::/scope:a,READ;prn::/scope:a/*,READ"),
}


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("secured")
    passwords = base / "passwd"
    for user, (password, acl) in USERS.items():
        (base / "pw").write_text(password + "\n")
        with open(base / "pw") as stdin:
            saved, sys.stdin = sys.stdin, stdin
            try:
                assert main(["auth", "add-user", "--password-file", str(passwords), "--user", user,
                             "--acl", acl, "--password-stdin"]) == 0  # fmt: skip
            finally:
                sys.stdin = saved
    assert "admin-secret" not in passwords.read_text()
    with StandaloneProcess(base / "data", extra_args=("--auth-password-file", str(passwords))) as process:
        yield process


async def manager_for(standalone: StandaloneProcess, user: str, password: str | None = None) -> StreamManager:
    config = ControllerClientConfig(username=user, password=password or USERS[user][0], retry_timeout_s=5)
    controller = await ControllerClient.connect(standalone.controller_uri, config)
    return StreamManager(controller)


async def read_all(manager: StreamManager, scope: str, stream: str) -> list[bytes]:
    end = await manager.tail_cut(scope, stream)
    async with manager.create_reader(scope, stream, end=end) as reader:
        return [event.data async for event in reader]


async def test_users_see_what_their_acl_grants(standalone: StandaloneProcess) -> None:
    admin = await manager_for(standalone, "admin")
    async with admin:
        for scope in ("a", "b"):
            await admin.create_scope(scope)
            await admin.create_stream(scope, "s", StreamConfiguration(ScalingPolicy.fixed(2)))
            async with await admin.create_writer(scope, "s") as writer:
                for i in range(100):
                    await writer.write_event(b"%s-%d" % (scope.encode(), i), routing_key=f"k{i % 7}")
        assert len(await read_all(admin, "a", "s")) == 100

    reader = await manager_for(standalone, "reader")
    async with reader:
        assert sorted(await read_all(reader, "a", "s")) == sorted(b"a-%d" % i for i in range(100))
        assert await reader.list_scopes() == ["a"]
        with pytest.raises(ControllerPermissionError, match="READ_UPDATE on prn::/scope:a/stream:s"):
            async with await reader.create_writer("a", "s") as writer:
                await writer.write_event(b"not allowed")
        with pytest.raises(ControllerPermissionError, match="prn::/scope:b/stream:s"):
            await read_all(reader, "b", "s")
        with pytest.raises(ControllerPermissionError):
            await reader.create_scope("c")


async def test_a_wrong_password_is_refused_and_named(standalone: StandaloneProcess) -> None:
    manager = await manager_for(standalone, "reader", password="guess")
    async with manager:
        with pytest.raises(ControllerAuthenticationError) as refused:
            await manager.list_scopes()
    assert "reader" in str(refused.value) and "guess" not in str(refused.value)


async def test_the_segment_store_refuses_a_client_without_a_token(standalone: StandaloneProcess) -> None:
    async with SegmentClient(standalone.segmentstore_endpoint) as client:
        with pytest.raises(AuthTokenCheckFailedError):
            await client.get_segment_info("a/s/0.#epoch.0")
        with pytest.raises(AuthTokenCheckFailedError):
            await client.create_segment(f"a/s/{uuid.uuid4().int % 1000}.#epoch.9")
