"""The official Pravega client against a standalone with TLS and authentication on (``tls_enabled=True,
auth_enabled=True``, credentials in its ``pravega_client_auth_*`` environment): it writes, reads through a
reader group (its state in table segments, under tokens for ``_RG`` and ``_kvtable`` streams), and commits a
transaction; our client, as a user the ACL does not allow, is refused on the same system."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from auth_fixtures import write_password_file
from official_client import read_with_group
from standalone_process import StandaloneProcess
from tls_fixtures import TlsFiles, make_tls_files

from controller_client import ControllerClient, ControllerClientConfig, StreamManager
from controller_client.errors import ControllerAuthenticationError, ControllerPermissionError

pytestmark = [pytest.mark.integration, pytest.mark.slow]
USERS = {"admin": ("admin-pw", "prn::*,READ_UPDATE"), "reader": ("reader-pw", "prn::/,READ;prn::/scope:sec/*,READ")}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, files: TlsFiles) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("secured")
    write_password_file(base / "passwd", USERS)
    flags = ("--tls-cert", str(files.cert), "--tls-key", str(files.key), "--auth-password-file", str(base / "passwd"))
    with StandaloneProcess(base / "data", extra_args=flags) as process:
        yield process


def uri(process: StandaloneProcess) -> str:
    return f"tls://localhost:{process.controller_port}"


def official(process: StandaloneProcess, files: Path, monkeypatch: pytest.MonkeyPatch, user: str) -> object:
    """A StreamManager of the official client as ``user`` (it reads these variables when it is made)."""
    monkeypatch.setenv("pravega_client_tls_cert_path", str(files))
    monkeypatch.setenv("pravega_client_auth_method", "Basic")
    monkeypatch.setenv("pravega_client_auth_username", user)
    monkeypatch.setenv("pravega_client_auth_password", USERS[user][0])
    return pravega_client.StreamManager(uri(process), auth_enabled=True, tls_enabled=True)


def test_official_client_with_tls_and_auth_writes_reads_a_group_and_commits(
    secured: StandaloneProcess, files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = official(secured, files.ca, monkeypatch, "admin")
    assert manager.create_scope("sec")  # type: ignore[attr-defined]
    assert manager.create_stream("sec", "events", 2)  # type: ignore[attr-defined]
    writer = manager.create_writer("sec", "events", 100)  # type: ignore[attr-defined]
    for i in range(300):
        writer.write_event(f"plain-{i}", f"key-{i % 5}")
    writer.flush()
    txn_writer = manager.create_transaction_writer("sec", "events", 7)  # type: ignore[attr-defined]
    txn = txn_writer.begin_txn()
    for i in range(50):
        txn.write_event(f"txn-{i}", f"key-{i % 5}")
    txn.commit()
    events = read_with_group(manager, "sec", "events", "secured-group", 350, timeout_s=120)
    assert sorted(events) == sorted([f"plain-{i}" for i in range(300)] + [f"txn-{i}" for i in range(50)])


async def test_our_client_as_a_reader_may_read_but_not_write_there(secured: StandaloneProcess, files: TlsFiles) -> None:
    def config(user: str, password: str) -> ControllerClientConfig:
        return ControllerClientConfig(trust_store=str(files.ca), username=user, password=password, retry_timeout_s=5)

    async with StreamManager(await ControllerClient.connect(uri(secured), config("reader", "reader-pw"))) as reader:
        end = await reader.tail_cut("sec", "events")
        async with reader.create_reader("sec", "events", end=end) as events:
            assert len([event async for event in events]) >= 350
        with pytest.raises(ControllerPermissionError, match="READ_UPDATE on prn::/scope:sec/stream:events"):
            async with await reader.create_writer("sec", "events") as writer:
                await writer.write_event(b"not allowed")
    async with StreamManager(await ControllerClient.connect(uri(secured), config("reader", "nope"))) as stranger:
        with pytest.raises(ControllerAuthenticationError):
            await stranger.list_scopes()
