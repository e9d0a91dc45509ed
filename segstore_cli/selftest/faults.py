"""The self-tester's fault schedule: one fault at a time, at random gaps, each undone before the next.

Faults: kill -9 of a segment store (restarted 0.5-6 s later, so sometimes before its ZooKeeper session ends;
with JetStream Tier-1 sometimes with its disk wiped), a kill of a segment store and then of another one while
it recovers the first one's containers, SIGSTOP of a segment store for 1-12 s (past its 4 s session: a zombie
that wakes up under load), kill -9 and SIGSTOP of a controller, a ZooKeeper kill -9 and restart, a NATS node
kill (JetStream Tier-1), and operations a user does: scale a stream up or down, truncate it at a cut the
verifier has read, and a Tier-2 outage (the S3 server frozen for 2-15 s).
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable

from controller_client.controller.api import ControllerClient
from controller_client.errors import ScalePreconditionFailedError
from controller_client.stream_manager import StreamManager
from segstore_cli.selftest.cluster import SESSION_TIMEOUT_MS, SelftestCluster
from segstore_cli.selftest.fault_kinds import SABOTAGE, WEIGHTS, fault_possible
from segstore_cli.selftest.verifier import Verifier
from segstore_cli.selftest.workload import EXPECTED

MAX_SEGMENTS = 6
SCALE_TIMEOUT_S = 120.0


class StuckError(RuntimeError):
    """An operation did not finish long after every fault was undone (a liveness bug; ends the run)."""


class FaultSchedule:
    def __init__(
        self, cluster: SelftestCluster, manager: StreamManager, controller: ControllerClient, scope: str,
        verifier: Verifier, rng: random.Random, gap_s: tuple[float, float], kinds: list[str],
    ) -> None:  # fmt: skip
        self.cluster, self.manager, self.controller, self.scope = cluster, manager, controller, scope
        self.verifier, self.rng = verifier, rng
        self.gap_s = gap_s
        self.kinds = [k for k in kinds if self._possible(k)]
        self.injected: collections.Counter[str] = collections.Counter()
        self.log: list[str] = []
        self.crashes: list[str] = []
        self._started = time.monotonic()
        self.current = ""

    async def run(self, stop: asyncio.Event) -> None:
        actions: dict[str, Callable[[], Awaitable[str]]] = {k: getattr(self, f"_{k}") for k in self.kinds}
        weights = [(WEIGHTS | SABOTAGE)[k] for k in self.kinds]
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.rng.uniform(*self.gap_s))
                return
            except TimeoutError:
                pass
            self._note_crashes()
            kind = self.rng.choices(self.kinds, weights)[0]
            self.current = kind
            try:
                what = await actions[kind]()
            finally:
                await self.cluster.heal()
                self.current = ""
            self.injected[kind] += 1
            self.log.append(f"{time.monotonic() - self._started:8.1f}s {what}")

    def _possible(self, kind: str) -> bool:
        return fault_possible(kind, self.cluster.tier1, self.cluster.tier2)

    def _note_crashes(self) -> None:
        for name, code in self.cluster.crashed().items():
            child = self.cluster.children[name]
            self.crashes.append(f"{name} exited by itself with code {code}; log tail:\n{child.log_tail()}")
            child.process = None

    def _pick(self, names: list[str]) -> str:
        return self.rng.choice(names)

    async def _kill_segmentstore(self) -> str:
        name = self._pick(self.cluster.segment_store_names)
        wipe = self.rng.random() < 0.5
        down_s = self.rng.uniform(0.5, 6.0)
        await self.cluster.kill(name, wipe=wipe)
        await asyncio.sleep(down_s)
        await self.cluster.restart(name)
        wiped = " (disk wiped)" if wipe and self.cluster.tier1 == "jetstream" else ""
        return f"kill -9 {name}{wiped}, down {down_s:.1f}s"

    async def _kill_during_recovery(self) -> str:
        first, second = self.rng.sample(self.cluster.segment_store_names, 2)
        await self.cluster.kill(first)
        delay_s = SESSION_TIMEOUT_MS / 1000 + self.rng.uniform(0.2, 2.0)  # the containers move and recover
        await asyncio.sleep(delay_s)
        await self.cluster.kill(second)
        await self.cluster.restart(first)
        await self.cluster.restart(second)
        return f"kill -9 {first}, then {second} {delay_s:.1f}s later while it took over"

    async def _pause_segmentstore(self) -> str:
        name = self._pick(self.cluster.segment_store_names)
        pause_s = self.rng.uniform(1.0, 12.0)
        self.cluster.pause(name)
        await asyncio.sleep(pause_s)
        self.cluster.resume(name)
        return f"SIGSTOP {name} for {pause_s:.1f}s"

    async def _kill_controller(self) -> str:
        name = self._pick(self.cluster.controller_names)
        down_s = self.rng.uniform(0.5, 4.0)
        await self.cluster.kill(name)
        await asyncio.sleep(down_s)
        await self.cluster.restart(name)
        return f"kill -9 {name}, down {down_s:.1f}s"

    async def _pause_controller(self) -> str:
        name = self._pick(self.cluster.controller_names)
        pause_s = self.rng.uniform(1.0, 8.0)
        self.cluster.pause(name)
        await asyncio.sleep(pause_s)
        self.cluster.resume(name)
        return f"SIGSTOP {name} for {pause_s:.1f}s"

    async def _restart_zookeeper(self) -> str:
        down_s = self.rng.uniform(0.5, 5.0)
        await self.cluster.kill_zookeeper()
        await asyncio.sleep(down_s)
        await self.cluster.restart_zookeeper()
        return f"kill -9 ZooKeeper, down {down_s:.1f}s"

    async def _kill_nats_node(self) -> str:
        down_s = self.rng.uniform(0.5, 6.0)
        index = await self.cluster.kill_nats_node(self.rng)
        await asyncio.sleep(down_s)
        await self.cluster.restart_nats_node(index)
        return f"kill -9 NATS node {index}, down {down_s:.1f}s"

    async def _tier2_outage(self) -> str:
        outage_s = self.rng.uniform(2.0, 15.0)
        self.cluster.pause_tier2()
        await asyncio.sleep(outage_s)
        self.cluster.resume_tier2()
        return f"Tier-2 (S3) frozen for {outage_s:.1f}s"

    async def _scale(self) -> str:
        stream = self._pick(list(self.verifier.streams))
        try:
            segments = sorted(await self.manager.current_segments(self.scope, stream), key=lambda s: s.key_start)
            if len(segments) < MAX_SEGMENTS and (len(segments) == 1 or self.rng.random() < 0.5):
                victim = self.rng.choice(segments)
                middle = (victim.key_start + victim.key_end) / 2
                sealed, ranges = [victim.segment_id], [(victim.key_start, middle), (middle, victim.key_end)]
            else:
                i = self.rng.randrange(len(segments) - 1)
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

    async def _truncate(self) -> str:
        stream = self._pick(list(self.verifier.streams))
        cut = self.verifier.truncation_cut(stream)
        if cut is None:
            return f"truncate {stream}: nothing verified yet"
        try:
            await self.manager.truncate(cut)
        except EXPECTED as exc:
            return f"truncate {stream}: failed under a fault ({type(exc).__name__})"
        return f"truncate {stream} at a verified cut of {len(cut.positions)} segments"

    async def _lose_data(self) -> str:
        """Sabotage: truncate the plain stream at its tail, deleting acknowledged events nobody verified yet."""
        stream = next(s for s, plain in self.verifier.streams.items() if plain)
        cut = await self.manager.tail_cut(self.scope, stream)
        await self.manager.truncate(cut)
        return f"SABOTAGE: truncated {stream} at its tail"
