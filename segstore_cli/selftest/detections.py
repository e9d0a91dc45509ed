"""Tier-1 rollbacks the segment stores detected, read from their logs.

A segment store refuses a Tier-1 log that came back shorter than what it acknowledged (``DataLogCorruptedError``:
"log container-N: stream S ends at sequence R, but sequence A was acknowledged ... rolled back"): its container
stops and stays offline until an operator acts. That is the product refusing what it cannot vouch for, not a silent
loss: the report counts each refused log as a *detected* rollback, apart from the violations (an acknowledged
event missing from what was read is one). A detection ends the run, failed (the container would stay offline,
its writers would wait for ever): the runner stops injecting faults, undoes the active ones (a process left
stopped would hang the end of the run), and stops.

Invariants: every line of a segment store's log is scanned once, whole (a line still being written is read at the
next scan); a log is counted once however often it is refused (every restart of its container refuses it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path

REFUSED = re.compile(
    rb"log (container-\d+): stream \S+ (?:ends at|stored our fence right after) sequence \d+, but sequence \d+ "
    rb"was acknowledged"
)
"""What a segment store logs when it refuses a rolled-back JetStream log (``tier1/jetstream/log.py``)."""


class RollbackDetected(RuntimeError):
    """A segment store refused a rolled-back Tier-1 log (ends the run: an operator must act)."""


@dataclass
class RollbackWatch:
    """Scans the segment stores' logs (``logs``: name -> path) for refused Tier-1 logs."""

    logs: dict[str, Path]
    detected: dict[str, str] = field(default_factory=dict)
    """Per refused Tier-1 log (``container-N``), the first line that said so, with the store that logged it."""
    found: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at the first refusal :meth:`run` sees (the runner then stops the faults, heals the cluster and ends)."""
    _offsets: dict[str, int] = field(default_factory=dict)

    def scan(self) -> list[str]:
        """The logs refused since the last scan (each once, ever)."""
        new: list[str] = []
        for name, path in self.logs.items():
            try:
                with open(path, "rb") as log:
                    log.seek(self._offsets.get(name, 0))
                    data = log.read()
            except FileNotFoundError:
                continue
            whole = data[: data.rfind(b"\n") + 1]
            self._offsets[name] = self._offsets.get(name, 0) + len(whole)
            for line in whole.splitlines():
                found = REFUSED.search(line)
                if found is None:
                    continue
                log_name = found.group(1).decode()
                if log_name not in self.detected:
                    self.detected[log_name] = f"{name}: {line.decode(errors='replace').strip()}"
                    new.append(log_name)
        return new

    def error(self) -> RollbackDetected:
        """What ends the run once :attr:`found` is set."""
        first = next(iter(self.detected.values()), "")
        return RollbackDetected(f"Tier-1 rollback detected (refused, not lost): {first}")

    async def run(self, stop: asyncio.Event, interval_s: float = 1.0) -> None:
        """Scan every ``interval_s`` until ``stop``, or until the first refusal (then :attr:`found` is set)."""
        while not stop.is_set():
            if await asyncio.to_thread(self.scan):
                self.found.set()
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await stop.wait()
