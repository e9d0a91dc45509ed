"""A zombie owner in another process never gets an acknowledged write the new owner misses.

Real ZooKeeper; Tier-1 either file ledger logs in one shared directory or JetStream logs
on a real 3-node NATS cluster. The zombie (this file run as a script) initializes
a log and appends continuously with many entries in flight, recording every
acknowledged entry in a file (flushed per ack). While it runs, the test process
initializes a new instance of the same log (fencing the zombie) and reads the log. Every
entry the zombie recorded as acknowledged must be in what the new owner read, the entries
read must be a gap-free prefix of the zombie's call order (plus possibly unacknowledged
ones after it), and the zombie must have been fenced. Repeated with different timings.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.factory import FileLedgerLogFactory
from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.nats_server import NatsCluster
from segment_store.tier1.log import DataLogWriterNotPrimaryError, DurableDataLogFactory, LogAddress
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import CoordinationStore

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
ZOMBIE_RUN_LIMIT_S = 15.0


def log_factory(spec: dict[str, str], store: CoordinationStore) -> DurableDataLogFactory:
    """The zombie's and the new owner's Tier-1: ``spec`` names the backend and where it keeps its data."""
    if spec["backend"] == "jetstream":
        servers = tuple(spec["servers"].split(","))
        prefix = spec["prefix"]
        config = JetStreamLogConfig(servers=servers, replicas=len(servers), stream_prefix=prefix,
                                    subject_prefix=f"{prefix}.tier1", max_append_length_bytes=16 * 1024)  # fmt: skip
        return JetStreamLogFactory(config, store)
    # Small ledgers: the zombie rolls over often, so fencing also lands mid-rollover.
    return FileLedgerLogFactory(
        FileLedgerLogConfig(
            root_dir=Path(spec["root"]), rollover_size_bytes=96 * 1024, max_append_length_bytes=16 * 1024, fsync=True
        ),
        store,
    )


def payload(trial: int, index: int, rng: random.Random) -> bytes:
    return f"z{trial}-{index:08d}|".encode() + rng.randbytes(rng.randint(10, 4000))


def index_of(data: bytes) -> int:
    return int(data.split(b"|", 1)[0].split(b"-")[1])


async def zombie_main(hosts: str, spec: dict[str, str], acks: Path, trial: int, in_flight: int) -> int:
    """Append forever (bounded), recording acknowledged indexes; exit 0 once fenced."""
    store = await KazooCoordinationStore.connect(hosts)
    factory = log_factory(spec, store)
    await factory.initialize()
    log = factory.create_log(trial)
    rng = random.Random(trial)
    with open(acks, "w", buffering=1) as record:
        await log.initialize(timeout=20)
        record.write(f"READY {log.epoch}\n")
        pending: set[asyncio.Future[LogAddress]] = set()
        fenced = asyncio.Event()

        def on_done(index: int, future: asyncio.Future[LogAddress]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            if error is None:
                record.write(f"ACK {index}\n")
            elif isinstance(error, DataLogWriterNotPrimaryError):
                fenced.set()
            else:
                record.write(f"ERROR {index} {type(error).__name__}: {error}\n")

        deadline = time.monotonic() + ZOMBIE_RUN_LIMIT_S
        index = 0
        try:
            while not fenced.is_set() and time.monotonic() < deadline:
                while len(pending) < in_flight:
                    future = log.append(payload(trial, index, rng))
                    future.add_done_callback(functools.partial(on_done, index))
                    pending.add(future)
                    index += 1
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        except DataLogWriterNotPrimaryError:
            fenced.set()
        await asyncio.gather(*pending, return_exceptions=True)
        record.write("FENCED\n" if fenced.is_set() else "NOT FENCED\n")
    await log.close()
    await factory.close()
    await store.close()
    return 0 if fenced.is_set() else 2


def start_zombie(hosts: str, spec: dict[str, str], acks: Path, trial: int, in_flight: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    args = [sys.executable, __file__, hosts, json.dumps(spec), str(acks), str(trial), str(in_flight)]
    return subprocess.Popen(args, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for_line(path: Path, prefix: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and any(line.startswith(prefix) for line in path.read_text().splitlines()):
            return
        if process.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(f"zombie never wrote {prefix!r}: {process.stdout.read() if process.stdout else ''!r}")


async def take_over(hosts: str, spec: dict[str, str], trial: int) -> tuple[list[int], int]:
    """Initialize a new owner (fencing the zombie) and read the whole log."""
    store = await KazooCoordinationStore.connect(hosts)
    factory = log_factory(spec, store)
    try:
        await factory.initialize()
        log = factory.create_log(trial)
        await log.initialize(timeout=20)
        indexes = [index_of(item.payload) async for item in log.read()]
        epoch = log.epoch
        await log.close()
        return indexes, epoch
    finally:
        await factory.close()
        await store.close()


@pytest.fixture(params=["file", "jetstream"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Where the zombie and the new owner keep the log: a shared directory, or a 3-node JetStream cluster."""
    if request.param == "file":
        return {"backend": "file", "root": str(tmp_path)}
    cluster: NatsCluster = request.getfixturevalue("nats_cluster")
    return {"backend": "jetstream", "servers": cluster.servers, "prefix": request.getfixturevalue("stream_prefix")}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("trial", "delay_s", "in_flight"),
    [(0, 0.0, 8), (1, 0.15, 32), (2, 0.4, 64), (3, 0.8, 4), (4, 1.2, 16)],
)
def test_zombie_with_new_owner(
    zk_chroot: str, backend: dict[str, str], tmp_path: Path, trial: int, delay_s: float, in_flight: int
) -> None:
    acks = tmp_path / "acks.txt"
    zombie = start_zombie(zk_chroot, backend, acks, trial, in_flight)
    try:
        wait_for_line(acks, "READY", zombie, timeout_s=30)
        time.sleep(delay_s)
        read, epoch = asyncio.run(take_over(zk_chroot, backend, trial))
        output = zombie.communicate(timeout=30)[0].decode(errors="replace")
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.wait(10)
    lines = acks.read_text().splitlines()
    assert zombie.returncode == 0, f"zombie exit {zombie.returncode}: {output}\n{lines[-5:]}"
    assert lines[-1] == "FENCED"
    assert not [line for line in lines if line.startswith("ERROR")]
    acknowledged = [int(line.split()[1]) for line in lines if line.startswith("ACK")]
    assert acknowledged == sorted(acknowledged), "acknowledgements out of call order"
    assert read == list(range(len(read))), "the new owner's log is not a gap-free prefix of the appends"
    missing = set(acknowledged) - set(read)
    assert not missing, f"acknowledged by the zombie but lost: {sorted(missing)[:10]}"
    assert epoch >= 2
    if delay_s >= 0.4:
        assert acknowledged, "the zombie should have acknowledged something before being fenced"


if __name__ == "__main__":
    hosts_arg, spec_arg, acks_arg, trial_arg, in_flight_arg = sys.argv[1:6]
    sys.exit(
        asyncio.run(zombie_main(hosts_arg, json.loads(spec_arg), Path(acks_arg), int(trial_arg), int(in_flight_arg)))
    )
