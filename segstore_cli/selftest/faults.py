"""The self-tester's fault schedule: faults at random gaps, several active at once within a rule (``overlap``).

Faults: kill -9 of a segment store (restarted 0.5-6 s later, so sometimes before its ZooKeeper session ends;
with JetStream Tier-1 sometimes with its disk wiped), a kill of a segment store and then of another one while
it recovers the first one's containers, SIGSTOP of a segment store for 1-12 s (sometimes past its 4 s session),
a zombie segment store (SIGSTOP for its session timeout plus 3-8 s: its containers are taken over; woken up, it
must be fenced), a segment store cut off ZooKeeper for 1-12 s (a partition through its ``proxy``: connections
reset or blackholed; past its session it runs on, its containers move, it must be fenced) or off every NATS node
for 1-8 s (JetStream Tier-1: its appends wait, or fail and are retried), or off its clients (writers, readers,
controllers) for 1-8 s, kill -9 and SIGSTOP
of a controller, a ZooKeeper kill -9 and restart (with the ensemble: all of it, or only its leader, found by
``srvr``), a NATS node kill, a NATS node SIGSTOP for 2-8 s and a NATS node power loss (killed, its store rolled
back to a copy taken 2-8 s before while it ran, restarted: Raft repairs it) (JetStream Tier-1), and operations a
user does: scale a stream up or down, truncate it at a cut the verifier has read, a Tier-2 outage (the S3 server
frozen for 2-15 s) and a full Tier-2 disk for 11-18 s, longer than the flush age (chunk writes fail with ENOSPC;
writes must go on in Tier-1 and nothing be lost once space is back).

Sabotage (never drawn unless asked for; the run must fail): ``lose_data`` truncates a stream at its tail (the
verifier must count the events lost), ``nats_quorum_rollback`` rolls back a majority of the NATS nodes (the segment
stores must refuse the shortened Tier-1 logs: the run ends as a detected rollback, not as silent loss).

Every gap (``gap_s``) the schedule starts a fault that :func:`~segstore_cli.selftest.overlap.pick_fault` draws:
a kind by weight and targets the overlap rule admits next to the faults still active (none: it waits for the next
gap); until every kind asked for has started once, kinds not started yet come first (a short run covers them all).
Each fault undoes itself; its own random generator is drawn from the schedule's when it starts, so a seed
repeats the draws (which faults overlap still depends on timing). When the schedule stops it waits for the
active faults to end.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from itertools import permutations

from controller_client.controller.api import ControllerClient
from controller_client.errors import ScalePreconditionFailedError
from controller_client.stream_manager import StreamManager
from segment_store.writer.config import WriterConfig
from segstore_cli.selftest.cluster import SESSION_TIMEOUT_MS, SelftestCluster
from segstore_cli.selftest.fault_kinds import SABOTAGE, WEIGHTS, fault_possible
from segstore_cli.selftest.overlap import OverlapRule, claims_of, pick_fault
from segstore_cli.selftest.proxy import MODES
from segstore_cli.selftest.verifier import Verifier
from segstore_cli.selftest.workload import EXPECTED

MAX_SEGMENTS = 6
SCALE_TIMEOUT_S = 120.0
ZOMBIE_MARGIN_S = (3.0, 8.0)
"""A zombie's pause beyond its ZooKeeper session timeout (enough for the session to expire on ZooKeeper's tick
and the controller to move its containers)."""


ONE_SEGMENT_STORE = (
    "kill_segmentstore", "pause_segmentstore", "zombie_segmentstore", "partition_zookeeper", "partition_nats",
    "partition_clients",
)  # fmt: skip
"""The kinds that act on one segment store."""


class StuckError(RuntimeError):
    """An operation did not finish long after every fault was undone (a liveness bug; ends the run)."""


@dataclass
class ActiveFault:
    kind: str
    targets: tuple[str, ...]
    claims: frozenset[str]
    started: float


class FaultSchedule:
    def __init__(
        self, cluster: SelftestCluster, manager: StreamManager, controller: ControllerClient, scope: str,
        verifier: Verifier, rng: random.Random, gap_s: tuple[float, float], kinds: list[str], at_once: int = 2,
    ) -> None:  # fmt: skip
        self.cluster, self.manager, self.controller, self.scope = cluster, manager, controller, scope
        self.verifier, self.rng = verifier, rng
        self.gap_s = gap_s
        self.kinds = [k for k in kinds if self._possible(k)]
        self.rule = OverlapRule.for_cluster(
            at_once,
            segment_stores=len(cluster.segment_store_names),
            controllers=len(cluster.controller_names),
            nats_nodes=len(cluster.nats.nodes) if cluster.nats is not None else 0,
        )
        self.injected: collections.Counter[str] = collections.Counter()
        self.seconds: dict[str, float] = collections.defaultdict(float)
        """Per kind, the seconds its faults were active, summed."""
        self.most_at_once = 0
        self.log: list[str] = []
        self.crashes: list[str] = []
        self.started = time.monotonic()
        """The fault log's clock starts here."""
        self.active: dict[int, ActiveFault] = {}
        self.kinds_started: set[str] = set()
        """The kinds started at least once (until each has, the schedule draws among the others first)."""

    @property
    def current(self) -> str:
        """The active faults, for the progress line."""
        return ", ".join(" ".join((f.kind, *f.targets)) for f in self.active.values())

    async def run(self, stop: asyncio.Event) -> None:
        weights = {k: (WEIGHTS | SABOTAGE)[k] for k in self.kinds}
        async with asyncio.TaskGroup() as group:
            while not stop.is_set():
                try:
                    async with asyncio.timeout(self.rng.uniform(*self.gap_s)):
                        await stop.wait()
                    break
                except TimeoutError:
                    pass
                self._note_crashes()
                active = [f.claims for f in self.active.values()]
                not_yet = set(self.kinds) - self.kinds_started
                picked = pick_fault(self.rng, weights, self._targets, self.rule, active, first=not_yet)
                if picked is None:
                    continue
                kind, targets = picked
                self.kinds_started.add(kind)
                fault = ActiveFault(kind, targets, claims_of(kind, targets), time.monotonic())
                action = getattr(self, f"_{kind}")(random.Random(self.rng.randrange(2**32)), *targets)
                self.active[id(fault)] = fault
                self.most_at_once = max(self.most_at_once, len(self.active))
                group.create_task(self._run_fault(fault, action))

    async def _run_fault(self, fault: ActiveFault, action: Awaitable[str]) -> None:
        what = " ".join((fault.kind, *fault.targets, "(cut short: the run ended)"))
        try:
            what = await action
        finally:  # counted also when the run ends during it (a detected rollback ends it at once)
            del self.active[id(fault)]
            ended = time.monotonic()
            self.injected[fault.kind] += 1
            self.seconds[fault.kind] += ended - fault.started
            at = fault.started - self.started
            self.log.append(f"{at:8.1f}s {what} (active {ended - fault.started:.1f}s)")

    def _targets(self, kind: str) -> list[tuple[str, ...]]:
        """Every target tuple a fault of ``kind`` may act on (``[()]``: it has none)."""
        stores = self.cluster.segment_store_names
        if kind == "kill_during_recovery":
            return list(permutations(stores, 2))
        if kind in ONE_SEGMENT_STORE:
            return [(name,) for name in stores]
        if kind in ("kill_controller", "pause_controller"):
            return [(name,) for name in self.cluster.controller_names]
        if kind in ("kill_nats_node", "pause_nats_node", "nats_power_loss"):
            return [(f"nats{i}",) for i in range(len(self.cluster.nats.nodes) if self.cluster.nats else 0)]
        return [()]

    def _possible(self, kind: str) -> bool:
        return fault_possible(kind, self.cluster.tier1, self.cluster.tier2, self.cluster.zookeeper_mode)

    def _note_crashes(self) -> None:
        for name, code in self.cluster.crashed().items():
            child = self.cluster.children[name]
            self.crashes.append(f"{name} exited by itself with code {code}; log tail:\n{child.log_tail()}")
            child.process = None

    async def _kill_segmentstore(self, rng: random.Random, name: str) -> str:
        wipe = rng.random() < 0.5
        down_s = rng.uniform(0.5, 6.0)
        await self.cluster.kill(name, wipe=wipe)
        await asyncio.sleep(down_s)
        await self.cluster.restart(name)
        wiped = " (disk wiped)" if wipe and self.cluster.tier1 == "jetstream" else ""
        return f"kill -9 {name}{wiped}, down {down_s:.1f}s"

    async def _kill_during_recovery(self, rng: random.Random, first: str, second: str) -> str:
        await self.cluster.kill(first)
        delay_s = SESSION_TIMEOUT_MS / 1000 + rng.uniform(0.2, 2.0)  # the containers move and recover
        await asyncio.sleep(delay_s)
        await self.cluster.kill(second)
        await self.cluster.restart(first)
        await self.cluster.restart(second)
        return f"kill -9 {first}, then {second} {delay_s:.1f}s later while it took over"

    async def _pause_segmentstore(self, rng: random.Random, name: str) -> str:
        pause_s = rng.uniform(1.0, 12.0)
        self.cluster.pause(name)
        await asyncio.sleep(pause_s)
        self.cluster.resume(name)
        return f"SIGSTOP {name} for {pause_s:.1f}s"

    async def _zombie_segmentstore(self, rng: random.Random, name: str) -> str:
        pause_s = SESSION_TIMEOUT_MS / 1000 + rng.uniform(*ZOMBIE_MARGIN_S)
        self.cluster.pause(name)
        await asyncio.sleep(pause_s)
        self.cluster.resume(name)
        return f"zombie {name}: SIGSTOP for {pause_s:.1f}s (session {SESSION_TIMEOUT_MS / 1000:.0f}s)"

    async def _partition_zookeeper(self, rng: random.Random, name: str) -> str:
        return await self._partition(rng, name, "zookeeper", "ZooKeeper", 12.0)

    async def _partition_nats(self, rng: random.Random, name: str) -> str:
        return await self._partition(rng, name, "nats", "NATS", 8.0)

    async def _partition_clients(self, rng: random.Random, name: str) -> str:
        return await self._partition(rng, name, "clients", "its clients", 8.0)

    async def _partition(self, rng: random.Random, name: str, link: str, peer: str, longest_s: float) -> str:
        """Cut ``name``'s ``link`` through its proxy for 1 s to ``longest_s``, then heal it."""
        mode = rng.choice(MODES)
        cut_s = rng.uniform(1.0, longest_s)
        self.cluster.partition(name, link, mode)
        await asyncio.sleep(cut_s)
        self.cluster.heal_partition(name, link)
        return f"partition {name} from {peer} ({mode}) for {cut_s:.1f}s"

    async def _kill_controller(self, rng: random.Random, name: str) -> str:
        down_s = rng.uniform(0.5, 4.0)
        await self.cluster.kill(name)
        await asyncio.sleep(down_s)
        await self.cluster.restart(name)
        return f"kill -9 {name}, down {down_s:.1f}s"

    async def _pause_controller(self, rng: random.Random, name: str) -> str:
        pause_s = rng.uniform(1.0, 8.0)
        self.cluster.pause(name)
        await asyncio.sleep(pause_s)
        self.cluster.resume(name)
        return f"SIGSTOP {name} for {pause_s:.1f}s"

    async def _restart_zookeeper(self, rng: random.Random) -> str:
        down_s = rng.uniform(0.5, 5.0)
        await self.cluster.kill_zookeeper()
        await asyncio.sleep(down_s)
        await self.cluster.restart_zookeeper()
        return f"kill -9 ZooKeeper, down {down_s:.1f}s"

    async def _kill_zookeeper_leader(self, rng: random.Random) -> str:
        down_s = rng.uniform(0.5, 6.0)
        server_id = await self.cluster.kill_zookeeper_leader()
        await asyncio.sleep(down_s)
        await self.cluster.restart_zookeeper()
        return f"kill -9 the ZooKeeper leader (server {server_id}), down {down_s:.1f}s"

    async def _kill_nats_node(self, rng: random.Random, node: str) -> str:
        down_s = rng.uniform(0.5, 6.0)
        index = int(node.removeprefix("nats"))
        await self.cluster.kill_nats_node(index)
        await asyncio.sleep(down_s)
        await self.cluster.restart_nats_node(index)
        return f"kill -9 NATS node {index}, down {down_s:.1f}s"

    async def _pause_nats_node(self, rng: random.Random, node: str) -> str:
        pause_s = rng.uniform(2.0, 8.0)
        index = int(node.removeprefix("nats"))
        self.cluster.pause_nats_node(index)
        await asyncio.sleep(pause_s)
        self.cluster.resume_nats_node(index)
        return f"SIGSTOP NATS node {index} for {pause_s:.1f}s"

    async def _nats_power_loss(self, rng: random.Random, node: str) -> str:
        """A NATS node loses power: its store comes back as it was 2-8 s before (a copy taken then, while it ran);
        Raft must bring it up to date from the others, losing nothing acknowledged."""
        index = int(node.removeprefix("nats"))
        copies = await self.cluster.copy_nats_stores([index])
        age_s, down_s = rng.uniform(2.0, 8.0), rng.uniform(0.5, 4.0)
        await asyncio.sleep(age_s)
        await self.cluster.power_loss_nats_nodes([index], copies)
        await asyncio.sleep(down_s)
        await self.cluster.restart_nats_nodes([index])
        return f"power loss of NATS node {index}: kill -9, its store rolled back {age_s:.1f}s, down {down_s:.1f}s"

    async def _nats_quorum_rollback(self, rng: random.Random) -> str:
        """Sabotage: a majority of the NATS nodes lose power and come back with their stores 3-6 s old; they
        restart first (and elect leaders among themselves), the others, killed too with their stores intact, after.
        Acknowledged appends are gone from Tier-1: the segment stores must refuse the shortened logs."""
        assert self.cluster.nats is not None
        nodes = list(range(len(self.cluster.nats.nodes)))
        majority = sorted(rng.sample(nodes, len(nodes) // 2 + 1))
        rest = [index for index in nodes if index not in majority]
        copies = await self.cluster.copy_nats_stores(majority)
        age_s = rng.uniform(3.0, 6.0)
        await asyncio.sleep(age_s)
        await self.cluster.power_loss_nats_nodes(nodes, copies)
        await self.cluster.restart_nats_nodes(majority)
        await self.cluster.restart_nats_nodes(rest)
        return f"SABOTAGE: NATS nodes {majority} lost power, their stores rolled back {age_s:.1f}s"

    async def _tier2_disk_full(self, rng: random.Random) -> str:
        """Tier-2 refuses writes (ENOSPC) for longer than the storage writer's flush age, so every segment store
        with data tries to flush into the full disk (a shorter fault may see no write at all: nothing tested)."""
        age_s = WriterConfig().flush_max_age_s
        full_s = rng.uniform(age_s + 1.0, age_s + 8.0)
        self.cluster.fill_tier2()
        await asyncio.sleep(full_s)
        self.cluster.free_tier2()
        return f"Tier-2 disk full (chunk writes fail with ENOSPC) for {full_s:.1f}s"

    async def _tier2_outage(self, rng: random.Random) -> str:
        outage_s = rng.uniform(2.0, 15.0)
        self.cluster.pause_tier2()
        await asyncio.sleep(outage_s)
        self.cluster.resume_tier2()
        return f"Tier-2 (S3) frozen for {outage_s:.1f}s"

    async def _scale(self, rng: random.Random) -> str:
        stream = rng.choice(list(self.verifier.streams))
        try:
            segments = sorted(await self.manager.current_segments(self.scope, stream), key=lambda s: s.key_start)
            if len(segments) < MAX_SEGMENTS and (len(segments) == 1 or rng.random() < 0.5):
                victim = rng.choice(segments)
                middle = (victim.key_start + victim.key_end) / 2
                sealed, ranges = [victim.segment_id], [(victim.key_start, middle), (middle, victim.key_end)]
            else:
                i = rng.randrange(len(segments) - 1)
                pair = segments[i : i + 2]
                sealed, ranges = [s.segment_id for s in pair], [(pair[0].key_start, pair[1].key_end)]
            started = await self.controller.scale(self.scope, stream, sealed, ranges, int(time.time() * 1000))
        except ScalePreconditionFailedError:
            return f"scale {stream}: refused (segments changed meanwhile)"
        except EXPECTED as exc:
            return f"scale {stream}: failed under a fault ({type(exc).__name__})"
        deadline = time.monotonic() + SCALE_TIMEOUT_S
        while not await self._scale_done(stream, started.epoch):
            if time.monotonic() > deadline:
                raise StuckError(f"scale of {stream} from epoch {started.epoch} did not finish in {SCALE_TIMEOUT_S} s")
            await asyncio.sleep(0.2)
        return f"scale {stream}: {len(sealed)} -> {len(ranges)} segments"

    async def _scale_done(self, stream: str, epoch: int) -> bool:
        try:
            return await self.controller.check_scale(self.scope, stream, epoch)
        except EXPECTED:
            return False

    async def _truncate(self, rng: random.Random) -> str:
        stream = rng.choice(list(self.verifier.streams))
        cut = self.verifier.truncation_cut(stream)
        if cut is None:
            return f"truncate {stream}: nothing verified yet"
        try:
            await self.manager.truncate(cut)
        except EXPECTED as exc:
            return f"truncate {stream}: failed under a fault ({type(exc).__name__})"
        return f"truncate {stream} at a verified cut of {len(cut.positions)} segments"

    async def _lose_data(self, rng: random.Random) -> str:
        """Sabotage: truncate the plain stream at its tail, deleting acknowledged events nobody verified yet."""
        stream = next(s for s, plain in self.verifier.streams.items() if plain)
        cut = await self.manager.tail_cut(self.scope, stream)
        await self.manager.truncate(cut)
        return f"SABOTAGE: truncated {stream} at its tail"
