"""Only the lease stops a cut-off owner: a file-ledger zombie whose ZooKeeper traffic is frozen.

The zombie (this file run as a script) owns a file ledger log with a 2 s ownership lease and appends with many
entries in flight, recording every acknowledgement with its wall-clock time. It reaches ZooKeeper through a
proxy the test freezes, so it cannot learn that it was fenced: nothing but its lease (acknowledge only within
half a lease of a confirmed ownership check) stops it. The new owner, connected directly, fences it, waits the
lease recorded with the zombie's open ledger, and reads the log. Every acknowledged entry must be there, and no
acknowledgement may come later than the lease allows after the fence.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tcp_proxy import FreezableProxy

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.tier1.log import DurableDataLogError, LogAddress
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
LEASE_S = 2.0
RUN_LIMIT_S = 30.0


def config(root: Path, lease_s: float) -> FileLedgerLogConfig:
    return FileLedgerLogConfig(root_dir=root, ownership_lease_s=lease_s, max_append_length_bytes=4096, fsync=True)


async def zombie_main(hosts: str, root: Path, acks: Path) -> int:
    store = await KazooCoordinationStore.connect(hosts)
    log = FileLedgerLog("lease", config(root, LEASE_S), store)
    await log.initialize(timeout=20)
    with open(acks, "w", buffering=1) as record:
        record.write("READY\n")

        def on_done(index: int, future: asyncio.Future[LogAddress]) -> None:
            if not future.cancelled() and future.exception() is None:
                record.write(f"ACK {index} {time.time():.6f}\n")

        pending: set[asyncio.Future[LogAddress]] = set()
        deadline = time.monotonic() + RUN_LIMIT_S
        index = 0
        try:
            while time.monotonic() < deadline:
                while len(pending) < 16:
                    future = log.append(b"z-%08d|" % index + b"x" * 200)
                    future.add_done_callback(functools.partial(on_done, index))
                    pending.add(future)
                    index += 1
                _, pending = await asyncio.wait(pending, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
        except DurableDataLogError:
            pass
    return 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_zombie_cut_off_from_zookeeper_is_stopped_by_its_lease(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, tmp_path: Path
) -> None:
    host, port = zookeeper.connect_string.split(":")
    proxy = FreezableProxy(host, int(port)).start()
    chroot = zk_chroot[len(zookeeper.connect_string) :]
    acks = tmp_path / "acks.txt"
    zombie = subprocess.Popen(
        [sys.executable, __file__, proxy.address + chroot, str(tmp_path), str(acks)],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(FIXTURES)])), cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (acks.exists() and acks.read_text().count("ACK") >= 200):
            if zombie.poll() is not None:
                output = zombie.stdout.read() if zombie.stdout else b""
                raise AssertionError(f"the zombie exited before appending: {output!r}")
            assert time.monotonic() < deadline, "the zombie did not start appending"
            time.sleep(0.05)
        proxy.freeze()  # the zombie's ZooKeeper traffic stops; it keeps its files and its lease

        async def take_over() -> tuple[list[int], float, float]:
            store = await KazooCoordinationStore.connect(zk_chroot)
            try:
                log = FileLedgerLog("lease", config(tmp_path, 0.5), store)
                began = time.time()
                await log.initialize(timeout=30)
                took = time.time() - began
                read = [int(item.payload.split(b"|")[0][2:]) async for item in log.read()]
                await log.close()
                return read, began, took
            finally:
                await store.close()

        read, fenced_from, took = asyncio.run(take_over())
    finally:
        zombie.kill()
        zombie.wait(10)
        proxy.stop()
    lines = [line.split() for line in acks.read_text().splitlines() if line.startswith("ACK")]
    acknowledged = {int(index): float(at) for _, index, at in lines}
    assert took >= LEASE_S, f"the new owner read after {took:.2f} s, before the zombie's lease ran out"
    missing = set(acknowledged) - set(read)
    assert not missing, f"{len(missing)} entries acknowledged by the zombie are not in the log"
    assert read == list(range(len(read))), "the log is not a gap-free prefix of the zombie's appends"
    latest = max(acknowledged.values())
    assert latest <= fenced_from + LEASE_S, f"an acknowledgement {latest - fenced_from:.2f} s after the fence"


if __name__ == "__main__":
    sys.exit(asyncio.run(zombie_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))))
