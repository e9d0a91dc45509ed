"""The file ledger log's ownership lease: a new owner waits the leases of the owners of open ledgers that may still
acknowledge (also after a double failover), the owner renews in the background, and the lease is measured on a
clock that counts suspended time. Files are real (under tmp_path); the coordination store is the in-process one,
wrapped to fail or freeze on demand."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from ledger_helpers import FlakyStore, append_each, make_config, open_log, read_all, run

from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.tier1.log import DataLogNotAvailableError, DataLogWriterNotPrimaryError, LogAddress
from segment_store.tier1.log_metadata import LogMetadata
from segment_store.tier1.owner_identity import machine_identity
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore, Versioned

pytestmark = pytest.mark.unit


def test_initialize_with_a_live_owner_waits_its_recorded_lease_and_keeps_what_it_acknowledged(tmp_path: Path) -> None:
    """The old owner (alive: this process) keeps acknowledging under its lease while the new owner waits that
    lease (the one in the metadata, not the new owner's own) before reading; nothing acknowledged is lost."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        old = await open_log(make_config(tmp_path, ownership_lease_s=0.8), server.connect())
        assert old.metadata.lease_ms == 800
        acknowledged = await append_each(old, 2)
        new = FileLedgerLog("log", make_config(tmp_path, ownership_lease_s=0.1), server.connect())
        began = time.monotonic()
        opening = asyncio.create_task(new.initialize(timeout=10))
        await asyncio.sleep(0.05)  # the new owner has fenced (memory store: at once) and waits
        assert not opening.done()
        acknowledged += await append_each(old, 1)  # the old owner's check of the last group still covers it
        await opening
        assert time.monotonic() - began >= 0.8
        assert new.metadata.lease_ms == 100
        with pytest.raises(DataLogWriterNotPrimaryError):
            await asyncio.sleep(0.4)  # the old lease has run out: the next group needs a check, which fails
            await old.append(b"late")
        assert (await read_all(new))[: len(acknowledged)] == acknowledged
        await old.close()
        await new.close()

    run(body)


@pytest.mark.parametrize("where", ["here", "other machine", "old owner id"])
def test_initialize_with_the_old_owners_process_gone_waits_only_if_it_ran_elsewhere(tmp_path: Path, where: str) -> None:
    """A dead pid proves nothing about another machine or pid namespace (e.g. a container with the host's
    name), nor for an owner id without a machine identity: then the new owner waits the lease."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        lease_s = 30.0 if where == "here" else 0.8  # here: no wait, however slow the machine
        config = make_config(tmp_path, ownership_lease_s=lease_s)
        old = await open_log(config, server.connect())
        acknowledged = await append_each(old, 3)
        await old.close()
        exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        machine = {
            "here": machine_identity(),
            "other machine": machine_identity().split("@")[0] + "@another-boot/1",
            "old owner id": machine_identity().split("@")[0],
        }[where]
        store = server.connect()
        record = await store.get(old._keeper.path)
        gone = f"{machine}:{exited.stdout.strip()}:x"
        parsed = LogMetadata.parse(record.data)  # the owner named by the record and by the ledger it left open
        dead = replace(parsed, owner=gone, ledgers=tuple(replace(ledger, owner=gone) for ledger in parsed.ledgers))
        await store.compare_and_set(old._keeper.path, dead.serialize(), record.version)
        began = time.monotonic()
        new = await open_log(config, store)
        took = time.monotonic() - began
        assert took < 10 if where == "here" else took >= lease_s
        assert (await read_all(new))[:3] == acknowledged
        await new.close()

    run(body)


class SlowChecks(FlakyStore):
    """Ownership checks (linearized reads) take ``delay`` seconds; counts them."""

    def __init__(self, inner: CoordinationStore, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay
        self.checks = 0

    async def read_linearized(self, path: str) -> Versioned | None:
        self.checks += 1
        await asyncio.sleep(self.delay)
        return await super().read_linearized(path)


def test_append_under_steady_load_never_waits_for_a_lease_renewal(tmp_path: Path) -> None:
    """The lease is renewed in the background halfway through: with checks of 0.25 s and a lease of 2 s, no
    append after the first waits for one, though the first check's half lease (1 s) runs out meanwhile."""

    async def body() -> None:
        store = SlowChecks(MemoryCoordinationServer().connect(), delay=0.25)
        log = await open_log(make_config(tmp_path, ownership_lease_s=2.0), store)
        await append_each(log, 1)  # the first group waits for the first check
        checks = store.checks
        loop = asyncio.get_running_loop()
        began = loop.time()
        slowest = 0.0
        while loop.time() - began < 1.6:
            start = loop.time()
            await log.append(b"x" * 100)
            slowest = max(slowest, loop.time() - start)
        assert store.checks > checks  # renewed while appending
        assert slowest < 0.2, f"an append waited {slowest:.3f} s"
        await log.close()

    run(body)


class FrozenChecks(FlakyStore):
    """An owner's ZooKeeper traffic cut off on demand: its ownership checks wait while ``frozen``."""

    def __init__(self, inner: CoordinationStore) -> None:
        super().__init__(inner)
        self.thawed = asyncio.Event()
        self.thawed.set()

    async def read_linearized(self, path: str) -> Versioned | None:
        await self.thawed.wait()
        return await super().read_linearized(path)


async def keep_appending(log: FileLedgerLog, acked: list[bytes], stop: asyncio.Event) -> None:
    """Appends with many in flight until ``stop`` or the log refuses; records each acknowledged payload."""
    pending: set[asyncio.Future[LogAddress]] = set()
    number = 0

    def record(data: bytes, future: asyncio.Future[LogAddress]) -> None:
        if not future.cancelled() and future.exception() is None:
            acked.append(data)

    try:
        while not stop.is_set():
            while len(pending) < 16:
                data = b"a-%08d" % number
                number += 1
                future = log.append(data)
                future.add_done_callback(lambda f, d=data: record(d, f))
                pending.add(future)
            _, pending = await asyncio.wait(pending, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
    except DataLogWriterNotPrimaryError:
        pass
    await asyncio.gather(*pending, return_exceptions=True)


@pytest.mark.parametrize("b_lease_s", [0.0, 0.5], ids=["B without lease", "B with a lease"])
def test_double_failover_waits_for_the_lease_of_the_owner_still_alive(tmp_path: Path, b_lease_s: float) -> None:
    """A is alive and appending; B fences A and dies before it recovered A's ledger; C takes over. B's process is
    gone (here: B's owner id names a dead pid) or B ran without a lease, so the record C replaces says nothing
    about A, but A's open ledger does: C must wait A's lease, during which A, cut off from ZooKeeper, may still
    acknowledge. Every entry A acknowledged is read by C."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        a_store = FrozenChecks(server.connect())
        a = await open_log(make_config(tmp_path, ownership_lease_s=1.6), a_store)
        acked: list[bytes] = []
        stop = asyncio.Event()
        load = asyncio.create_task(keep_appending(a, acked, stop))
        while len(acked) < 50:
            await asyncio.sleep(0.01)
        a_store.thawed.clear()  # A cannot learn it was fenced: only its lease stops it
        b = FileLedgerLog("log", make_config(tmp_path, ownership_lease_s=b_lease_s), server.connect())
        with pytest.raises(DataLogNotAvailableError, match="initialize took over"):
            await b.initialize(timeout=0.3)  # B fences A, then dies while it waits out A's lease
        await b.close()
        store = server.connect()
        record = await store.get(b._keeper.path)
        exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        b_gone = replace(LogMetadata.parse(record.data), owner=f"{machine_identity()}:{exited.stdout.strip()}:b")
        await store.compare_and_set(b._keeper.path, b_gone.serialize(), record.version)
        c = await open_log(make_config(tmp_path, ownership_lease_s=1.0), store)
        read = [item.payload for item in await read_all(c)]
        stop.set()
        a_store.thawed.set()
        await load
        assert acked and set(acked) <= set(read), f"{len(set(acked) - set(read))} acknowledged by A, not read by C"
        await a.close()
        await c.close()

    run(body)


def test_lease_counts_time_the_machine_spent_suspended(tmp_path: Path) -> None:
    """The owner measures its lease on an injected clock (boot time by default): when the clock jumps past the
    lease (the machine was suspended), the next group waits for a fresh ownership check."""

    async def body() -> None:
        now = [1000.0]
        store = FrozenChecks(MemoryCoordinationServer().connect())
        log = await open_log(make_config(tmp_path, ownership_lease_s=10.0), store, clock=lambda: now[0])
        await log.append(b"checked")  # a check now covers what is synced in the next 5 s (on the clock)
        await log.append(b"covered")
        store.thawed.clear()
        now[0] += 60.0  # suspended for a minute: the monotonic clock did not move, this one did
        waiting = log.append(b"after the suspension")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.5)
        store.thawed.set()
        await waiting
        await log.close()

    run(body)


@pytest.mark.parametrize("lease_s", [0.8, 0.0])
def test_a_zombie_whose_clock_stood_still_while_cut_off(tmp_path: Path, lease_s: float) -> None:
    """The lease assumes the zombie's clock ran while it was stopped (boot time counts a suspend, not a
    hypervisor pause or a live migration in which the guest's clock stands still). Frozen here, with its
    ZooKeeper link cut: with a lease, the zombie acknowledges a group after the new owner read the ledger, and
    that acknowledged entry is not in the log (the documented hole: docs/cluster.md's failure table); with
    ``ownership_lease_s=0`` every group waits for a check that started after its sync, which the cut link fails,
    so nothing more is acknowledged."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        frozen = 1000.0
        zombie_store = FlakyStore(server.connect())
        zombie = await open_log(make_config(tmp_path, ownership_lease_s=lease_s), zombie_store, clock=lambda: frozen)
        acknowledged = await append_each(zombie, 1)  # a confirmed check: the lease starts now, and now stays
        zombie_store.fail_syncs = True  # cut off from ZooKeeper
        new = FileLedgerLog("log", make_config(tmp_path, ownership_lease_s=0.5), server.connect())
        await new.initialize(timeout=10)  # waits the zombie's recorded lease on its own (running) clock
        if lease_s:
            late = await zombie.append(b"acknowledged by a zombie under a lease its clock never saw run out")
            assert late.ledger_id == acknowledged[0].address.ledger_id  # in the ledger the new owner closed
            assert late not in [item.address for item in await read_all(new)]  # acknowledged, yet not in the log
        else:
            with pytest.raises((DataLogNotAvailableError, DataLogWriterNotPrimaryError)):
                await zombie.append(b"never acknowledged")
        assert (await read_all(new))[:1] == acknowledged  # what was acknowledged before the cut is kept
        await zombie.close()
        await new.close()

    run(body)
