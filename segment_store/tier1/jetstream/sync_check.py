"""Whether the NATS servers fsync before they acknowledge, learned from their monitoring endpoints.

JetStream's fsync policy is each server's ``sync_interval`` (``always``: fsync before every acknowledgement;
otherwise lazy, every 2 minutes by default, see :data:`~segment_store.tier1.jetstream.nats_server.LAZY_SYNC_RISK`).
A client cannot learn it over its NATS connection: the INFO a server sends on connect (id, name, version,
``max_payload``, ``jetstream``...), ``$JS.API.INFO`` (the account's usage and limits) and stream info carry no
fsync setting, and the ``$SYS.REQ.SERVER.*.VARZ`` requests answer only clients of the system account (checked
against nats-server 2.15.1). The monitoring endpoint does: ``GET /varz`` (and ``/jsz``) answers
``jetstream.config.sync_always`` (true with ``sync_interval: always``, absent otherwise) and
``jetstream.config.sync_interval`` (nanoseconds). The INFO does not name the monitoring port either, so only the
endpoints the operator gives (``--nats-monitor`` / ``$SEGSTORE_NATS_MONITOR``, :attr:`JetStreamLogConfig.monitors`)
are asked; without them the policy is not checked (:func:`warn_if_lazy` says so at INFO level).

:func:`warn_if_lazy` logs one WARNING naming every lazily syncing server, and one naming the endpoints it could
not read; it never fails the caller.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from segment_store.tier1.jetstream.nats_server import LAZY_SYNC_RISK

_log = logging.getLogger(__name__)
NANOS = 1_000_000_000


class SyncUnknownError(ValueError):
    """A monitoring endpoint did not say the server's fsync policy."""


@dataclass(frozen=True, slots=True)
class ServerSync:
    """One server's fsync policy as its ``/varz`` states it."""

    monitor: str
    """The monitoring endpoint asked (``http://host:8222``)."""
    server_name: str
    always: bool
    interval_s: float | None
    """The lazy period (``sync_interval``); None when the server does not state it."""

    def describe(self) -> str:
        period = f"every {self.interval_s:g} s" if self.interval_s is not None else "lazily"
        return f"{self.server_name} ({self.monitor}: fsync {period})"


def parse_monitors(text: str) -> tuple[str, ...]:
    """``http://h1:8222,h2:8222`` as a tuple of base URLs (``http://`` added, no trailing ``/``); ``ValueError``."""
    monitors = []
    for part in text.split(","):
        url = part.strip().rstrip("/")
        if not url:
            continue
        if "://" not in url:
            url = f"http://{url}"
        scheme, _, rest = url.partition("://")
        if scheme not in ("http", "https") or not rest or "/" in rest:
            raise ValueError(f"not a NATS monitoring URL: {part.strip()!r} (expected http://host:8222)")
        monitors.append(url)
    if not monitors:
        raise ValueError("no NATS monitoring URL given")
    return tuple(monitors)


def parse_varz(monitor: str, document: Mapping[str, Any]) -> ServerSync:
    """The fsync policy in a ``/varz`` document; raises :class:`SyncUnknownError` without JetStream's config."""
    jetstream = document.get("jetstream")
    config = jetstream.get("config") if isinstance(jetstream, Mapping) else None
    if not isinstance(config, Mapping):
        raise SyncUnknownError(f"{monitor}/varz has no jetstream.config (JetStream off?)")
    interval = config.get("sync_interval")
    return ServerSync(
        monitor=monitor,
        server_name=str(document.get("server_name") or document.get("server_id") or monitor),
        always=config.get("sync_always") is True,
        interval_s=interval / NANOS if isinstance(interval, int | float) and interval > 0 else None,
    )


def read_sync(monitor: str, timeout_s: float) -> ServerSync:
    """Ask ``monitor``'s ``/varz`` (blocking); raises :class:`SyncUnknownError`."""
    try:
        with urllib.request.urlopen(f"{monitor}/varz", timeout=timeout_s) as response:
            document = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SyncUnknownError(f"{monitor}/varz: {exc}") from exc
    if not isinstance(document, Mapping):
        raise SyncUnknownError(f"{monitor}/varz: not a JSON object")
    return parse_varz(monitor, document)


async def check_sync(monitors: Sequence[str], timeout_s: float) -> tuple[list[ServerSync], list[str]]:
    """Every endpoint asked at once: the policies learned, and why the others are unknown."""
    answers = await asyncio.gather(
        *(asyncio.to_thread(read_sync, monitor, timeout_s) for monitor in monitors), return_exceptions=True
    )
    learned: list[ServerSync] = []
    unknown: list[str] = []
    for answer in answers:
        if isinstance(answer, ServerSync):
            learned.append(answer)
        elif isinstance(answer, SyncUnknownError):
            unknown.append(str(answer))
        else:
            raise answer
    return learned, unknown


async def warn_if_lazy(servers: Sequence[str], monitors: Sequence[str], timeout_s: float) -> list[ServerSync]:
    """Log one WARNING naming the servers behind ``monitors`` that do not fsync before acknowledging (and one for
    the endpoints that did not answer); the lazy servers. No monitors: an INFO line that nothing was checked."""
    if not monitors:
        _log.info(
            "the fsync policy of the NATS servers %s is not checked: a NATS client cannot learn it; give their "
            "monitoring endpoints (--nats-monitor http://host:8222,...) to be warned of a lazy sync_interval",
            ",".join(servers),
        )
        return []
    learned, unknown = await check_sync(monitors, timeout_s)
    lazy = [server for server in learned if not server.always]
    if lazy:
        _log.warning(
            "NATS servers acknowledge JetStream appends before they fsync them: %s. With a lazy sync_interval %s. "
            "Set sync_interval: always in their jetstream block (segstore nats does by default)",
            ", ".join(server.describe() for server in lazy),
            LAZY_SYNC_RISK,
        )
    if unknown:
        _log.warning("cannot learn the fsync policy of NATS servers: %s", "; ".join(unknown))
    return lazy
