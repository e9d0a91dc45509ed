"""Reader groups with authentication on, through our client against a real standalone (controller and segment
store, ``--auth-password-file``): creating, reconfiguring and deleting a group needs READ_UPDATE on the group
(``prn::/scope:S/reader-group:G``); a user with READ on a group reads through it (its readers keep their
positions in the group's state) but cannot delete it, nor another consumer's group."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from auth_fixtures import write_password_file
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, ControllerClientConfig, StreamManager
from controller_client.errors import ControllerPermissionError
from controller_client.model import ScalingPolicy, StreamConfiguration, StreamCut
from controller_client.reader_groups.reader import GroupReaderConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCOPE, STREAM, EVENTS = "rgauth", "events", 40
MEMBER_STREAM = f"prn::/scope:{SCOPE},READ;prn::/scope:{SCOPE}/stream:{STREAM},READ"
USERS = {
    "admin": ("admin-pw", "prn::*,READ_UPDATE"),
    # the brief's case: READ on the scope and everything in it (every group too)
    "scope-reader": ("scope-pw", f"prn::/scope:{SCOPE},READ;prn::/scope:{SCOPE}/*,READ"),
    # READ on the stream and on one group
    "member": ("member-pw", f"{MEMBER_STREAM};prn::/scope:{SCOPE}/reader-group:shared,READ"),
}
FAST = GroupReaderConfig(refresh_interval_s=0.02, reader_timeout_s=None)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("rgauth")
    write_password_file(base / "passwd", USERS)
    with StandaloneProcess(base / "data", extra_args=("--auth-password-file", str(base / "passwd"))) as process:
        yield process


async def _manager(process: StandaloneProcess, user: str) -> StreamManager:
    config = ControllerClientConfig(username=user, password=USERS[user][0], retry_timeout_s=5)
    return StreamManager(await ControllerClient.connect(process.controller_uri, config))


@pytest.fixture
async def admin(standalone: StandaloneProcess) -> AsyncIterator[StreamManager]:
    async with await _manager(standalone, "admin") as manager:
        if await manager.create_scope(SCOPE):
            await manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(2)))
            async with await manager.create_writer(SCOPE, STREAM) as writer:
                for i in range(EVENTS):
                    await writer.write_event(f"e{i}".encode(), routing_key=f"k{i % 4}")
                await writer.flush()
        yield manager


async def _read_all(manager: StreamManager, group: str) -> list[bytes]:
    opened = await manager.reader_group(SCOPE, group)
    read: list[bytes] = []
    async with await opened.create_reader(f"{group}-reader", FAST) as reader:
        while len(read) < EVENTS:
            event = await reader.next_event(timeout_s=30)
            assert event is not None, f"read {len(read)} of {EVENTS} events"
            if event.data is not None:
                read.append(event.data)
    return read


async def test_a_scope_reader_cannot_create_reconfigure_or_delete_a_group(
    standalone: StandaloneProcess, admin: StreamManager
) -> None:
    await admin.create_reader_group(SCOPE, "others", [StreamCut(SCOPE, STREAM, {})])
    async with await _manager(standalone, "scope-reader") as reader:
        with pytest.raises(ControllerPermissionError, match=f"READ_UPDATE on prn::/scope:{SCOPE}/reader-group:others"):
            await reader.delete_reader_group(SCOPE, "others")
        with pytest.raises(ControllerPermissionError, match=f"READ_UPDATE on prn::/scope:{SCOPE}/reader-group:mine"):
            await reader.create_reader_group(SCOPE, "mine", [StreamCut(SCOPE, STREAM, {})])
        group = await reader.reader_group(SCOPE, "others")  # READ on the group: it may look
        assert group.registered is not None
        with pytest.raises(ControllerPermissionError, match="READ_UPDATE on"):
            await reader.controller.update_reader_group(group.registered)
    # the refused delete left the group whole: its owner still reads through it, then deletes it
    assert sorted(await _read_all(admin, "others")) == sorted(f"e{i}".encode() for i in range(EVENTS))
    await admin.delete_reader_group(SCOPE, "others")


async def test_a_member_reads_through_its_group_but_cannot_delete_it_nor_open_another(
    standalone: StandaloneProcess, admin: StreamManager
) -> None:
    await admin.create_reader_group(SCOPE, "shared", [StreamCut(SCOPE, STREAM, {})])
    await admin.create_reader_group(SCOPE, "private", [StreamCut(SCOPE, STREAM, {})])
    async with await _manager(standalone, "member") as member:
        read = await _read_all(member, "shared")  # its reader writes its positions into the group's state
        assert sorted(read) == sorted(f"e{i}".encode() for i in range(EVENTS))
        with pytest.raises(ControllerPermissionError, match="reader-group:shared"):
            await member.delete_reader_group(SCOPE, "shared")
        with pytest.raises(ControllerPermissionError, match="reader-group:private"):
            await member.delete_reader_group(SCOPE, "private")
        assert await (await member.reader_group(SCOPE, "shared")).online_readers() == []
    for name in ("shared", "private"):
        await admin.delete_reader_group(SCOPE, name)
