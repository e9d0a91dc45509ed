"""Pins: a reader's hold on Tier-2 chunk files, so garbage collection leaves them in place until it is done.

A reader outside the segment store (a Spark job reading the chunk files with Spark's own Parquet reader, a table
snapshot) is given a set of chunk files. Compaction and truncation release chunks to the
:mod:`~segment_store.storage.chunk_gc` queue; a pin keeps every chunk it holds from being deleted:

* A pin is ``(pin_id, segment)`` -> the chunk names it holds and a wall-clock expiry (epoch ms). Pinning again
  under the same key replaces the chunks and renews the expiry; :meth:`ChunkPins.release` ends it at once.
* :meth:`ChunkPins.held_for_s` says how long a chunk is still held (by its longest-living live pin): the garbage
  collector defers a due deletion by that much (at most a short step, so a released pin frees its chunks soon),
  and the boot sweep leaves held chunks to the collector instead of deleting them.
* Durable where the chunk metadata lives: each pin is one small JSON object in the container's Tier-2 system
  area, ``system/c{container}/pins/{pin_id}/{escaped segment}/x{expiry ms}-{nonce}`` (written before the pin
  counts; renewal writes the new object before deleting the old one). Boot (:meth:`ChunkPins.load`) reads them
  back, newest per key, and deletes the objects of expired pins, so pins survive a restart or a failover to
  another segment store.
* Expiry is wall-clock time (it must mean the same after a failover); a pin is live while ``now < expiry``.

Methods that touch storage run in a worker thread (blocking chunk storage calls); the in-memory view is a dict
replaced whole, so the loop thread reads it safely.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from segment_store.storage.chunk_storage import ChunkStorage, ChunkStorageError
from segment_store.storage.data_chunk_names import escape_segment_name

log = logging.getLogger(__name__)

MAX_PIN_TTL_MS = 24 * 3600 * 1000
"""Longest life a pin may be given at once (renew it for longer)."""
MAX_DEFER_S = 1.0
"""Longest step by which the garbage collector defers a held chunk before asking again."""


class PinError(ValueError):
    """A pin request that cannot be granted (bad id, TTL or chunk names)."""


@dataclass(frozen=True, slots=True)
class Pin:
    """``pin_id`` holds ``chunks`` of ``segment`` until ``expires_at_ms`` (epoch ms)."""

    pin_id: str
    segment: str
    chunks: frozenset[str]
    expires_at_ms: int
    object_name: str = ""


def pins_prefix(container_id: int) -> str:
    return f"system/c{container_id}/pins/"


class ChunkPins:
    """The pins of one container (see the module docstring)."""

    def __init__(
        self,
        storage: ChunkStorage,
        container_id: int,
        *,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._storage = storage
        self._cid = container_id
        self._now_ms = wall_clock_ms
        self._lock = threading.Lock()  # writers (worker threads); readers take the dict as it is
        self._pins: dict[tuple[str, str], Pin] = {}

    def load(self) -> None:
        """Read the pins back from storage (boot; worker thread). Deletes the objects of expired and replaced pins."""
        newest: dict[tuple[str, str], Pin] = {}
        stale: list[str] = []
        for name in self._storage.list(pins_prefix(self._cid)):
            try:
                value = json.loads(self._storage.read_all(name))
                pin = Pin(
                    str(value["pin_id"]),
                    str(value["segment"]),
                    frozenset(str(c) for c in value["chunks"]),
                    int(value["expires_at_ms"]),
                    name,
                )
            except (ValueError, KeyError, TypeError, ChunkStorageError) as error:
                log.error("container %s: unreadable pin object %r left in place: %r", self._cid, name, error)
                continue
            key = (pin.pin_id, pin.segment)
            old = newest.get(key)
            if old is not None and old.expires_at_ms >= pin.expires_at_ms:
                stale.append(name)
                continue
            if old is not None:
                stale.append(old.object_name)
            newest[key] = pin
        now = self._now_ms()
        live = {key: pin for key, pin in newest.items() if pin.expires_at_ms > now}
        stale += [pin.object_name for key, pin in newest.items() if key not in live]
        with self._lock:
            self._pins = live
        self._delete(stale)
        if live:
            log.info("container %s: %d chunk pins held over from before", self._cid, len(live))

    def pin(self, pin_id: str, segment: str, chunks: Iterable[str], ttl_ms: int) -> Pin:
        """Hold ``chunks`` of ``segment`` for ``ttl_ms`` from now under ``(pin_id, segment)`` (replacing what that
        key held). Durable before it returns. Worker thread. Raises PinError, and the chunk storage's errors."""
        if not pin_id or "/" in pin_id or len(pin_id) > 64 or pin_id.startswith("."):
            raise PinError(f"pin id {pin_id!r}: 1..64 characters, no '/', not starting with '.'")
        if not 0 < ttl_ms <= MAX_PIN_TTL_MS:
            raise PinError(f"pin TTL {ttl_ms} ms: must be in (0, {MAX_PIN_TTL_MS}]")
        held = frozenset(chunks)
        expires = self._now_ms() + ttl_ms
        name = f"{pins_prefix(self._cid)}{pin_id}/{escape_segment_name(segment)}/x{expires:015d}-{uuid.uuid4().hex[:8]}"
        body = {"pin_id": pin_id, "segment": segment, "chunks": sorted(held), "expires_at_ms": expires}
        self._storage.write_chunk(name, json.dumps(body).encode())
        pin = Pin(pin_id, segment, held, expires, name)
        with self._lock:
            old = self._pins.get((pin_id, segment))
            self._pins = {**self._pins, (pin_id, segment): pin}
        if old is not None:
            self._delete([old.object_name])
        return pin

    def release(self, pin_id: str, segment: str) -> bool:
        """End the pin ``(pin_id, segment)`` now; False if there was none. Worker thread."""
        with self._lock:
            pins = dict(self._pins)
            old = pins.pop((pin_id, segment), None)
            self._pins = pins
        if old is None:
            return False
        self._delete([old.object_name])
        return True

    def live(self) -> list[Pin]:
        """The pins live now, by expiry."""
        now = self._now_ms()
        return sorted((p for p in self._pins.values() if p.expires_at_ms > now), key=lambda p: p.expires_at_ms)

    def held_for_s(self, chunk: str) -> float | None:
        """Seconds until the last live pin holding ``chunk`` expires; None if no live pin holds it."""
        now = self._now_ms()
        until = max((p.expires_at_ms for p in self._pins.values() if chunk in p.chunks), default=0)
        return (until - now) / 1000.0 if until > now else None

    def held(self) -> set[str]:
        """Every chunk a live pin holds."""
        return {c for p in self.live() for c in p.chunks}

    def expire(self) -> int:
        """Forget expired pins and delete their objects (worker thread); returns how many."""
        now = self._now_ms()
        with self._lock:
            gone = [p for p in self._pins.values() if p.expires_at_ms <= now]
            self._pins = {k: p for k, p in self._pins.items() if p.expires_at_ms > now}
        self._delete([p.object_name for p in gone])
        return len(gone)

    def _delete(self, names: list[str]) -> None:
        for name in names:
            try:
                self._storage.delete_if_exists(name)
            except ChunkStorageError as error:  # an outage: the next boot's load deletes it
                log.warning("container %s: cannot delete pin object %r: %r", self._cid, name, error)


def defer_s(held_for_s: float) -> float:
    """How long the garbage collector waits before asking again about a chunk held for ``held_for_s``."""
    return min(held_for_s, MAX_DEFER_S) + 0.01


__all__ = ["MAX_DEFER_S", "MAX_PIN_TTL_MS", "ChunkPins", "Pin", "PinError", "defer_s", "pins_prefix"]
