"""The variants of the system ``bench/e2e.py`` runs on, and the tables comparing them.

* Tier-1 backends (``--tier1 file,jetstream-r1,jetstream-r3``): the standalone's flags, NATS servers started
  here for JetStream (``sync_interval`` from ``--nats-sync``, default ``always``; with several modes, say
  ``always,default``, each JetStream backend runs once per mode, named ``jetstream-r3/default``), and one row per
  backend.
* TLS (``--tls``): the whole bench again on a standalone with TLS on both planes (its certificate for
  ``localhost`` from a throwaway CA made here with trustme; every client trusts that CA, our client by
  ``ControllerClientConfig.trust_store``, the official one by ``pravega_client_tls_cert_path``), and one row per
  Tier-1 backend and mode with the ratio TLS / plain.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchlib import table
from e2e_system import Auth

from segment_store.tier1.jetstream.nats_server import SYNC_ALWAYS, NatsCluster


def add_tier1_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tier1`` and ``--nats-sync``."""
    parser.add_argument(
        "--tier1",
        default="file",
        help="comma-separated Tier-1 backends to run the whole bench on, one after another: file (fsync'd "
        "ledgers), jetstream-r1 (one NATS server), jetstream-r3 (a 3-node NATS cluster) (default file)",
    )
    parser.add_argument(
        "--nats-sync",
        default=SYNC_ALWAYS,
        help="the NATS servers' sync_interval, comma-separated: each JetStream backend runs once per mode "
        "(always, default, or a duration such as 10s; default always)",
    )


def tier1_backends(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The runs ``--tier1`` and ``--nats-sync`` ask for, each named (``file``, ``jetstream-r3``; with several modes
    ``jetstream-r3-sync-default``) with its NATS ``sync_interval``."""
    modes = [mode.strip() for mode in args.nats_sync.split(",") if mode.strip()] or [SYNC_ALWAYS]
    runs = []
    for backend in args.tier1.split(","):
        if backend not in ("file", "jetstream-r1", "jetstream-r3"):
            raise SystemExit(f"--tier1: unknown backend {backend!r} (file, jetstream-r1, jetstream-r3)")
        if backend == "file" or len(modes) == 1:
            runs.append((backend, modes[0]))
        else:
            runs += [(f"{backend}-sync-{mode}", mode) for mode in modes]
    return runs


@contextlib.contextmanager
def tier1_flags(backend: str, nats_dir: Path, sync: str = SYNC_ALWAYS) -> Iterator[tuple[str, ...]]:
    """The standalone's Tier-1 flags for ``backend`` (a name of :func:`tier1_backends`); JetStream backends get
    NATS servers started here with ``sync_interval`` ``sync``, and their monitoring endpoints are passed on (the
    segment store warns of a lazy one)."""
    kind = backend.split("-sync-")[0]
    if kind == "file":
        yield ()
        return
    size = {"jetstream-r1": 1, "jetstream-r3": 3}[kind]
    cluster = NatsCluster.on_free_ports(nats_dir, size, sync_interval=sync)
    cluster.start()
    try:
        yield ("--tier1", "jetstream", "--nats", cluster.servers, "--nats-monitor", cluster.monitors,
               "--tier1-replicas", str(size))  # fmt: skip
    finally:
        cluster.stop()


def tls_flags(directory: Path) -> tuple[tuple[str, ...], Path]:
    """A throwaway CA and a certificate for ``localhost`` under ``directory``: the standalone's TLS flags and
    the CA file clients trust."""
    import trustme  # the test extra: certificates made at run time, never kept

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="segstore bench CA")
    server = ca.issue_cert("localhost")
    ca_path, cert, key = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca.cert_pem.write_to_path(str(ca_path))
    server.cert_chain_pems[0].write_to_path(str(cert))
    server.private_key_pem.write_to_path(str(key))
    return ("--tls-cert", str(cert), "--tls-key", str(key)), ca_path


def auth_flags(directory: Path) -> tuple[tuple[str, ...], Auth]:
    """A password file with one user allowed everything, and a signing key: the standalone's flags and who the
    clients log in as."""
    import secrets

    from segstore_shared.auth.passwords import PasswordFile

    directory.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(16)
    passwd = directory / "passwd"
    passwd.write_text(PasswordFile.parse("").with_user("bench", password, "prn::*,READ_UPDATE").dump())
    return ("--auth-password-file", str(passwd)), Auth("bench", password, secrets.token_urlsafe(32))


def compare_tier1(by_tier1: dict[str, dict[str, Any]]) -> None:
    """One row per Tier-1 backend: our client's median events/s (fewest segments) and latencies."""
    rows = []
    for backend, found in by_tier1.items():
        medians = found.get("ours_median_events_per_s", {})
        row: dict[str, Any] = {"tier1": backend, "events_per_s": next(iter(medians.values()), "-")}
        for latency in found.get("latency", []):
            if latency.get("client") == "ours":
                row[f"p50_w{latency['window']}"] = latency["p50_ms"]
                row[f"p99_w{latency['window']}"] = latency["p99_ms"]
        for open_loop in found.get("open_loop", []):
            row[f"p99_at_{open_loop['offered_events_per_s']}"] = open_loop["p99_ms"]
        rows.append(row)
    columns = [("tier1", "tier1"), ("events_per_s", "ours events/s")]
    columns += [(key, key.replace("_w", " ms, window ").replace("_at_", " ms, open loop ")) for key in rows[0]
                if key.startswith("p")]  # fmt: skip
    table("Tier-1 backends compared (our client, 100 B events)", rows, columns)


def headline(found: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one run that TLS may change: events/s of each client and case, latencies, read rates."""
    row: dict[str, Any] = {}
    for case, rate in found.get("ours_median_events_per_s", {}).items():
        yield_every, segments = case.split("/")
        producer = "no yield" if yield_every == "0" else f"yield {yield_every}"
        row[f"ours {segments} seg, {producer} ev/s"] = rate
    for throughput in found.get("throughput", []):
        if throughput["client"] == "official":
            row["official ev/s"] = throughput["events_per_s"]
    for latency in found.get("latency", []):
        row[f"{latency['client']} p50 ms, w{latency['window']}"] = latency["p50_ms"]
        row[f"{latency['client']} p99 ms, w{latency['window']}"] = latency["p99_ms"]
    for open_loop in found.get("open_loop", []):
        row[f"ours p99 ms, open loop {open_loop['offered_events_per_s']}/s"] = open_loop["p99_ms"]
    reads = [t["read_events_per_s"] for t in found.get("throughput", []) if t["client"] == "ours"]
    if reads:
        row["ours read ev/s (best)"] = max(reads)
    return row


def compare_tls(
    plain: dict[str, dict[str, Any]],
    tls: dict[str, dict[str, Any]],
    secured: str = "TLS",
    plain_after: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Per Tier-1 backend, plain text against the secured run (``secured`` says what it had on: TLS,
    authentication or both), metric by metric, with the ratio secured / plain; printed and returned (for the
    JSON). With ``plain_after`` (a plain run after the secured one, so that the order of the runs does not pass
    for a cost), plain is the mean of the runs before and after, both shown."""
    rows: list[dict[str, Any]] = []
    for backend in plain:
        before, after = headline(plain[backend]), headline(tls.get(backend, {}))
        again = headline(plain_after.get(backend, {})) if plain_after is not None else {}
        for metric, value in before.items():
            other, second = after.get(metric), again.get(metric)
            base = (value + second) / 2 if isinstance(second, int | float) and isinstance(value, int | float) else value
            ratio = round(other / base, 2) if isinstance(other, int | float) and base else None
            row = {"tier1": backend, "metric": metric, "plain": value, "tls": other, "tls_over_plain": ratio}
            if plain_after is not None:
                row["plain_after"] = second
            rows.append(row)
    columns = [("tier1", "tier1"), ("metric", "metric"), ("plain", "plain"), ("tls", secured)]
    if plain_after is not None:
        columns.append(("plain_after", "plain again"))
    columns.append(("tls_over_plain", f"{secured} / plain"))
    table(f"plain against {secured} (100 B events; a ratio < 1 for events/s is a cost)", rows, columns)
    return rows
