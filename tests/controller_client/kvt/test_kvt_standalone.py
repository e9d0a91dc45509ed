"""Key-value tables on a real standalone (its own ZooKeeper, file Tier-1, filesystem Tier-2), as users meet them:
a table written, the standalone stopped and started again on the same data, and everything read back with the
same versions (conditions taken before the restart still hold); with authentication on, a user allowed on one
table (``prn::/scope:S/key-value-table:K``) uses it through our client, a reader of it reads but cannot write,
and a user without it is refused. The official Python client (``pravega`` 0.3.8) has no key-value tables."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from auth_fixtures import write_password_file
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, StreamManager
from controller_client.controller.channel import ControllerClientConfig
from controller_client.errors import ControllerPermissionError
from controller_client.kvt.errors import BadKeyVersionError
from controller_client.kvt.model import Insert, KeyValueTableConfiguration, Put, TableKey

pytestmark = [pytest.mark.integration, pytest.mark.slow]
_I = TypeVar("_I")
CONFIG = KeyValueTableConfiguration(partition_count=4, primary_key_length=8, secondary_key_length=4)
USERS = {
    "admin": ("admin-pw", "prn::*,READ_UPDATE"),
    "owner": ("owner-pw", "prn::/scope:shop,READ;prn::/scope:shop/key-value-table:carts,READ_UPDATE"),
    "viewer": ("viewer-pw", "prn::/scope:shop,READ;prn::/scope:shop/key-value-table:carts,READ"),
    "stranger": ("stranger-pw", "prn::/scope:shop,READ"),
}


@asynccontextmanager
async def manager_of(process: StandaloneProcess, user: str | None = None) -> AsyncIterator[StreamManager]:
    config = ControllerClientConfig(retry_timeout_s=10)
    if user is not None:
        config = ControllerClientConfig(username=user, password=USERS[user][0], retry_timeout_s=10)
    controller = await ControllerClient.connect(process.controller_uri, config)
    async with controller, StreamManager(controller) as manager:
        yield manager


async def collect(items: AsyncIterator[_I]) -> list[_I]:
    return [item async for item in items]


def cart(user: int, item: int) -> TableKey:
    return TableKey(b"user%04d" % user, b"i%03d" % item)


async def test_a_table_keeps_its_entries_and_versions_across_a_restart(tmp_path: Path) -> None:
    with StandaloneProcess(tmp_path / "data") as process:
        async with manager_of(process) as manager:
            await manager.create_scope("shop")
            assert await manager.create_key_value_table("shop", "carts", CONFIG)
            table = await manager.key_value_table("shop", "carts")
            written = {}
            for user in range(20):
                versions = await table.update([Insert(cart(user, item), b"qty=%d" % item) for item in range(5)])
                written.update({cart(user, item): v for item, v in enumerate(versions)})
            await table.remove(cart(0, 0), written.pop(cart(0, 0)))
        process.stop()
        process.start()
        async with manager_of(process) as manager:
            assert await manager.list_key_value_tables("shop") == ["carts"]
            assert await manager.get_key_value_table_configuration("shop", "carts") == CONFIG
            table = await manager.key_value_table("shop", "carts")
            entries = [e async for e in table.iterator(max_iteration_size=7).all().entries()]
            assert {e.key: e.version for e in entries} == written
            assert [e.key for e in entries] == sorted(written, key=lambda k: k.primary + k.secondary)
            assert await table.get(cart(0, 0)) is None
            replaced = await table.replace(cart(3, 1), b"qty=9", written[cart(3, 1)])  # a version from before
            with pytest.raises(BadKeyVersionError):
                await table.replace(cart(3, 1), b"qty=10", written[cart(3, 1)])
            found = await table.get(cart(3, 1))
            assert found is not None and (found.value, found.version) == (b"qty=9", replaced)
            items = [k.secondary for k in await collect(table.iterator().for_primary_key(b"user0003").keys())]
            assert items == [b"i000", b"i001", b"i002", b"i003", b"i004"]
            assert await manager.delete_key_value_table("shop", "carts")
            assert await manager.list_key_value_tables("shop") == []


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("kvt-secured")
    passwords = write_password_file(base / "passwd", USERS)
    with StandaloneProcess(base / "data", extra_args=("--auth-password-file", str(passwords))) as process:
        yield process


async def test_users_reach_a_table_as_its_acl_says(secured: StandaloneProcess) -> None:
    async with manager_of(secured, "admin") as admin:
        await admin.create_scope("shop")
        assert await admin.create_key_value_table("shop", "carts", CONFIG)
        assert await admin.create_key_value_table("shop", "hidden", CONFIG)
    async with manager_of(secured, "owner") as owner:
        with pytest.raises(ControllerPermissionError):
            await owner.create_key_value_table("shop", "more", CONFIG)  # needs READ_UPDATE on the scope
        assert await owner.list_key_value_tables("shop") == ["carts"]
        table = await owner.key_value_table("shop", "carts")
        version = await table.put(cart(1, 1), b"mine")
        await table.update([Put(cart(1, 2), b"two"), Put(cart(1, 3), b"three")])
    async with manager_of(secured, "viewer") as viewer:
        table = await viewer.key_value_table("shop", "carts")
        found = await table.get(cart(1, 1))
        assert found is not None and (found.value, found.version) == (b"mine", version)
        assert len(await collect(table.iterator().all().keys())) == 3
        with pytest.raises(ControllerPermissionError, match="READ_UPDATE"):
            await table.put(cart(1, 1), b"not allowed")
        with pytest.raises(ControllerPermissionError):
            await viewer.key_value_table("shop", "hidden")
    async with manager_of(secured, "stranger") as stranger:
        with pytest.raises(ControllerPermissionError, match="key-value-table:carts"):
            await stranger.key_value_table("shop", "carts")


def test_the_official_python_client_has_no_key_value_tables() -> None:
    """``pravega`` 0.3.8's StreamManager offers no key-value tables (its Rust core has none): nothing to interoperate
    with. When a release adds them, this fails, and a test of tables written by one client and read by the other
    belongs here."""
    manager = pravega_client.StreamManager
    assert not [name for name in dir(manager) if "key_value" in name or "kvt" in name.lower()]
