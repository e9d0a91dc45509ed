"""``segstore admin`` as users run it: a child process against one standalone with authentication on (the admin
user's credentials in ``SEGSTORE_USERNAME``/``SEGSTORE_PASSWORD``), every command with tables and with ``--json``,
and its errors: a missing stream (exit 1), a bad argument (2), a controller that is not there (3), a wrong password
or a missing permission (4), each one line on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from auth_fixtures import write_password_file
from standalone_process import StandaloneProcess
from tls_fixtures import make_tls_files

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamCut, StreamManager
from controller_client.controller.api import ReaderGroupConfig, ReaderGroupRetention
from controller_client.controller.channel import ControllerClientConfig
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration

USERS = {
    "admin": ("admin-secret", "prn::*,READ_UPDATE"),
    "viewer": ("viewer-secret", "prn::/,READ;prn::/scope:view,READ;prn::/scope:view/*,READ"),
}
EVENTS, EVENT_BYTES = 300, 100
FRAMED = EVENTS * (8 + EVENT_BYTES)  # what the segments hold: each event behind its 8-byte header


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("admin")
    passwords = write_password_file(base / "passwd", USERS)
    with StandaloneProcess(base / "data", extra_args=("--auth-password-file", str(passwords))) as process:
        yield process


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> object:
        assert self.code == 0, self
        return json.loads(self.out)


def command(standalone: StandaloneProcess, args: tuple[str, ...], user: str | None) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSTORE_")}
    env["SEGSTORE_CONTROLLER"] = standalone.controller_uri
    if user is not None:
        env["SEGSTORE_USERNAME"] = user
        env["SEGSTORE_PASSWORD"] = USERS[user][0] if user in USERS else "wrong"
    return [sys.executable, "-m", "segstore_cli", "admin", *args], env


def admin(standalone: StandaloneProcess, *args: str, user: str | None = "admin", stdin: str | None = None) -> Result:
    """``segstore admin ARGS`` as ``user`` (its password from the environment; an unknown user gets a wrong one)."""
    argv, env = command(standalone, args, user)
    done = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, timeout=60)
    return Result(done.returncode, done.stdout, done.stderr)


def admin_all(standalone: StandaloneProcess, *runs: tuple[tuple[str, ...], str | None]) -> list[Result]:
    """Several ``(args, user)`` runs at once (they do not depend on each other), in order."""
    started = []
    for args, user in runs:
        argv, env = command(standalone, args, user)
        started.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for process in started:
        out, err = process.communicate(timeout=60)
        results.append(Result(process.returncode, out, err))
    return results


def one_error_line(result: Result, code: int) -> str:
    """The error line of a run that failed with ``code`` (it wrote nothing else)."""
    assert result.code == code, result
    assert result.out == "" and result.err.count("\n") == 1 and result.err.startswith("segstore admin"), result
    return result.err.rstrip("\n")


async def manager(standalone: StandaloneProcess) -> StreamManager:
    config = ControllerClientConfig(username="admin", password=USERS["admin"][0], retry_timeout_s=10)
    return StreamManager(await ControllerClient.connect(standalone.controller_uri, config))


async def stream_with_events(standalone: StandaloneProcess, scope: str, stream: str, segments: int) -> None:
    async with await manager(standalone) as streams:
        await streams.create_scope(scope)
        await streams.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
        async with await streams.create_writer(scope, stream) as writer:
            for i in range(EVENTS):
                await writer.write_event(b"%0100d" % i, routing_key=f"key-{i % 17}")


def test_scope_and_stream_commands(standalone: StandaloneProcess) -> None:
    assert admin(standalone, "scope", "create", "catalog").out == "scope catalog created\n"
    again = admin(standalone, "scope", "create", "catalog", "--json").json()
    assert again == {"action": "exists", "target": "scope catalog", "changed": False}
    created = admin(standalone, "stream", "create", "catalog/items", "--segments", "2", "--retention-size", "10MiB")
    assert created.out == "stream catalog/items created (2 segments)\n"
    listed, scopes, controllers = admin_all(
        standalone,
        (("stream", "list", "catalog", "--json"), "admin"),
        (("scope", "list"), "admin"),
        (("controllers", "--json"), "admin"),
    )
    assert listed.json() == {"scope": "catalog", "streams": ["items"]}
    assert scopes.out.splitlines()[0] == "SCOPE" and "catalog" in scopes.out.splitlines()
    assert controllers.json() == {"controllers": [f"127.0.0.1:{standalone.controller_port}"]}


async def test_describe_scale_truncate_and_segment_info(standalone: StandaloneProcess) -> None:
    await stream_with_events(standalone, "shop", "orders", segments=2)
    described = admin(standalone, "stream", "describe", "shop/orders", "--json").json()
    assert isinstance(described, dict)
    lengths = {s["segment"]: s["length"] for s in described["segments"]}
    assert set(lengths) == {"0", "1"} and sum(lengths.values()) == FRAMED == described["retained_bytes"]
    assert described["head"] == [{"segment": s, "segment_id": int(s), "offset": 0} for s in ("0", "1")]
    assert [(c["segment"], c["offset"]) for c in described["tail"]] == sorted(lengths.items())
    assert described["sealed"] is False and described["config"]["scaling"]["min_segments"] == 2
    assert {s["endpoint"] for s in described["segments"]} == {f"127.0.0.1:{standalone.segmentstore_port}"}

    text = admin(standalone, "stream", "describe", "shop/orders").out.splitlines()
    assert text[0] == "stream shop/orders: active, epoch 0"
    assert f"size         {FRAMED:,} bytes ({FRAMED / 1024:.1f} KiB) from head to tail, in 2 segment(s)" in text
    header = next(i for i, line in enumerate(text) if line.startswith("SEGMENT "))
    assert text[header].split() == ["SEGMENT", "KEY", "RANGE", "STATE", "START", "LENGTH", "BYTES", "ENDPOINT"]
    rows = [line.split() for line in text[header + 1 : header + 3]]
    assert [row[:4] for row in rows] == [["0", "[0,", "0.5)", "active"], ["1", "[0.5,", "1)", "active"]]

    scaled = admin(standalone, "stream", "scale", "shop/orders", "--to", "3")
    assert scaled.out == (
        "stream shop/orders scaled (sealed 0, 1; created 2.#epoch.1 [0, 0.3333), 3.#epoch.1 [0.3333, 0.6667), "
        "4.#epoch.1 [0.6667, 1); epoch 1)\n"
    )
    split = admin(standalone, "stream", "scale", "shop/orders", "--seal", "2.#epoch.1", "--ranges", "0-0.1,0.1-0.3333",
                  "--json").json()  # fmt: skip
    assert split == {
        "action": "scaled",
        "target": "stream shop/orders",
        "changed": True,
        "epoch": 2,
        "sealed": ["2.#epoch.1"],
        "created": [
            {"segment": "5.#epoch.2", "key_range": [0.0, 0.1]},
            {"segment": "6.#epoch.2", "key_range": [0.1, 1 / 3]},
        ],
        "done": True,
    }

    sealed_segment, active_segment = admin_all(
        standalone,
        (("segment", "info", "shop/orders/0", "--json"), "admin"),
        (("segment", "info", "shop/orders/3.#epoch.1"), "admin"),
    )
    info = sealed_segment.json()
    assert isinstance(info, dict) and info["sealed"] is True and info["length"] == lengths["0"]
    assert info["key_range"] is None and info["name"] == "shop/orders/0.#epoch.0"
    assert "key range    [0.3333, 0.6667)" in active_segment.out.splitlines()

    truncated = admin(standalone, "stream", "truncate", "shop/orders", "--tail", "--json").json()
    assert isinstance(truncated, dict) and truncated["action"] == "truncated"
    after, gone = admin_all(
        standalone,
        (("stream", "describe", "shop/orders", "--history", "0", "--json"), "admin"),
        (("segment", "info", "shop/orders/0"), "admin"),
    )
    described = after.json()
    assert isinstance(described, dict) and described["retained_bytes"] == 0
    assert [e["epoch"] for e in described["history"]] == [0, 1, 2]
    assert {c["segment"] for c in described["head"]} == {"3.#epoch.1", "4.#epoch.1", "5.#epoch.2", "6.#epoch.2"}
    assert one_error_line(gone, 1) == "segstore admin: segment shop/orders/0.#epoch.0 does not exist"  # truncated


async def test_seal_and_delete(standalone: StandaloneProcess) -> None:
    await stream_with_events(standalone, "old", "s", segments=1)
    refused = one_error_line(admin(standalone, "stream", "delete", "old/s"), 1)
    assert refused == "segstore admin: stream old/s is not sealed: seal it first (segstore admin stream seal old/s) " \
                      "or pass --seal"  # fmt: skip
    assert admin(standalone, "stream", "seal", "old/s").out == "stream old/s sealed\n"
    again, described = admin_all(
        standalone,
        (("stream", "seal", "old/s", "--json"), "admin"),
        (("stream", "describe", "old/s", "--json"), "admin"),
    )
    assert again.json() == {"action": "already-sealed", "target": "stream old/s", "changed": False}
    document = described.json()
    assert isinstance(document, dict) and document["sealed"] is True and document["retained_bytes"] == FRAMED
    assert admin(standalone, "stream", "delete", "old/s", "--json").json() == {
        "action": "deleted",
        "target": "stream old/s",
        "changed": True,
    }
    assert admin(standalone, "scope", "delete", "old").out == "scope old deleted\n"


async def test_reader_groups(standalone: StandaloneProcess) -> None:
    async with await manager(standalone) as streams:
        await streams.create_scope("rg")
        await streams.create_stream("rg", "s")
        start = (StreamCut("rg", "s", {}),)
        automatic = ReaderGroupRetention.AUTOMATIC
        await streams.controller.create_reader_group(
            ReaderGroupConfig("rg", "billing", start, retention_type=automatic)
        )
        await streams.controller.create_reader_group(
            ReaderGroupConfig("rg", "audit", start, (StreamCut("rg", "s", {0: 0}),))
        )
    listed, audit, billing, missing = admin_all(
        standalone,
        (("reader-group", "list", "rg"), "admin"),
        (("reader-group", "describe", "rg/audit", "--json"), "admin"),
        (("reader-group", "describe", "rg/billing"), "admin"),
        (("reader-group", "describe", "rg/nope"), "admin"),
    )
    assert listed.out.splitlines() == [
        "READER GROUP  RETENTION  STREAMS",
        "rg/audit      NONE       rg/s",
        "rg/billing    AUTOMATIC  rg/s",
    ]
    document = audit.json()
    assert isinstance(document, dict) and document["retention"] == "NONE" and document["readers"] is None
    assert document["streams"] == [
        {"stream": "rg/s", "start": [], "end": [{"segment": "0", "segment_id": 0, "offset": 0}], "subscribed": False}
    ]
    assert "retention    AUTOMATIC" in billing.out.splitlines() and "no reader positions" in billing.out
    assert one_error_line(missing, 1) == "segstore admin: reader group rg/nope does not exist"


async def test_a_scope_is_emptied_of_reader_groups_and_deleted_as_a_user_does(standalone: StandaloneProcess) -> None:
    assert admin(standalone, "scope", "create", "market").out == "scope market created\n"
    assert admin(standalone, "stream", "create", "market/orders").out == "stream market/orders created (1 segment)\n"
    async with await manager(standalone) as streams:
        head = [StreamCut("market", "orders", {})]
        await streams.create_reader_group("market", "billing", head, retention=ReaderGroupRetention.AUTOMATIC)
        await streams.create_reader_group("market", "audit", head)  # NONE: subscribes to nothing
        await streams.controller.create_reader_group(ReaderGroupConfig("market", "reports", tuple(head)))  # no state
    deleted = admin(standalone, "stream", "delete", "market/orders", "--seal")
    assert deleted.out == "stream market/orders deleted\n"
    streams_left, refused, groups = admin_all(
        standalone,
        (("stream", "list", "market"), "admin"),
        (("scope", "delete", "market"), "admin"),
        (("reader-group", "list", "market"), "admin"),
    )
    assert streams_left.out == "no streams in scope market\n"
    assert one_error_line(refused, 1) == (
        "segstore admin: scope market is not empty: reader groups market/audit, market/billing, market/reports "
        "(segstore admin reader-group delete SCOPE/GROUP)"
    )
    assert groups.out.splitlines() == [
        "READER GROUP    RETENTION  STREAMS",
        "market/audit    NONE       market/orders",
        "market/billing  AUTOMATIC  market/orders",
        "market/reports  NONE       market/orders",
    ]
    removed = admin_all(
        standalone, *((("reader-group", "delete", f"market/{g}"), "admin") for g in ("audit", "billing"))
    )
    assert [r.out for r in removed] == ["reader group market/audit deleted\n", "reader group market/billing deleted\n"]
    assert admin(standalone, "reader-group", "delete", "market/reports", "--json").json() == {
        "action": "deleted",
        "target": "reader group market/reports",
        "changed": True,
    }
    again, none_left, listed_json = admin_all(
        standalone,
        (("reader-group", "delete", "market/audit"), "admin"),
        (("reader-group", "list", "market"), "admin"),
        (("reader-group", "list", "market", "--json"), "admin"),
    )
    assert one_error_line(again, 1) == "segstore admin: reader group market/audit does not exist"
    assert none_left.out == "no reader groups in scope market\n"
    assert listed_json.json() == {"scope": "market", "reader_groups": [], "complete": True, "hidden": 0}
    assert admin(standalone, "scope", "delete", "market").out == "scope market deleted\n"


async def test_segment_states_are_the_same_words_in_segment_info_and_describe(standalone: StandaloneProcess) -> None:
    await stream_with_events(standalone, "words", "s", segments=2)
    assert admin(standalone, "stream", "scale", "words/s", "--seal", "1", "--ranges", "0.5-1").code == 0
    described = admin(standalone, "stream", "describe", "words/s", "--json").json()
    assert isinstance(described, dict) and described["state"] == "active"
    states = {s["segment"]: s["state"] for s in described["retained_segments"] + described["segments"]}
    assert states == {"0": "active", "1": "sealed", "2.#epoch.1": "active"}
    infos = admin_all(standalone, *((("segment", "info", f"words/s/{label}"), "admin") for label in states))
    shown = {label: next(line.split()[1] for line in r.out.splitlines() if line.startswith("state "))
             for label, r in zip(states, infos, strict=True)}  # fmt: skip
    assert shown == states
    table = admin(standalone, "stream", "describe", "words/s").out.splitlines()
    assert table[0] == "stream words/s: active, epoch 1"
    header = table.index(next(line for line in table if line.startswith("SEGMENT ")))
    rows = [line.split() for line in table[header + 1 : table.index("", header)]]
    assert {row[0]: row[3] for row in rows} == states  # SEGMENT, KEY RANGE (two words), STATE
    admin(standalone, "stream", "seal", "words/s")
    sealed, info = admin_all(
        standalone,
        (("stream", "describe", "words/s", "--json"), "admin"),
        (("segment", "info", "words/s/0", "--json"), "admin"),
    )
    document = sealed.json()
    assert isinstance(document, dict) and document["state"] == "sealed"
    assert {s["state"] for s in document["segments"]} == {"sealed"}
    segment = info.json()
    assert isinstance(segment, dict) and segment["state"] == "sealed"


def test_tls_problems_name_the_flags_as_typed(standalone: StandaloneProcess, tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls")
    other = make_tls_files(tmp_path / "other")
    tls = ("--controller", f"tls://localhost:{standalone.controller_port}", "--retry-timeout", "1")
    missing, mismatched = admin_all(
        standalone,
        ((*tls, "--trust-store", str(tmp_path / "nope.pem"), "scope", "list"), "admin"),
        ((*tls, "--trust-store", str(files.ca), "--client-cert", str(files.client_cert), "--client-key",
          str(other.client_key), "scope", "list"), "admin"),
    )  # fmt: skip
    assert one_error_line(missing, 2) == f"segstore admin: --trust-store {tmp_path / 'nope.pem'}: no such file"
    assert one_error_line(mismatched, 2) == (
        f"segstore admin: --client-key {other.client_key}: does not belong to the certificate in --client-cert "
        f"{files.client_cert}"
    )


async def test_errors_say_what_was_wrong(standalone: StandaloneProcess) -> None:
    async with await manager(standalone) as streams:
        await streams.create_scope("errs")
    missing, missing_json, no_scope, bad_name, half_scale = admin_all(
        standalone,
        (("stream", "describe", "errs/missing"), "admin"),
        (("stream", "describe", "errs/missing", "--json"), "admin"),
        (("stream", "list", "nowhere"), "admin"),
        (("stream", "describe", "orders"), "admin"),
        (("stream", "scale", "errs/missing", "--seal", "0"), "admin"),
    )
    assert one_error_line(missing, 1) == "segstore admin: stream errs/missing does not exist"
    assert one_error_line(missing_json, 1) == "segstore admin: stream errs/missing does not exist"
    assert one_error_line(no_scope, 1) == "segstore admin: scope nowhere does not exist"
    assert "SCOPE/NAME" in one_error_line(bad_name, 2)
    assert "--seal and --ranges go together" in one_error_line(half_scale, 2)


def test_unreachable_controller_exits_3_quickly(standalone: StandaloneProcess) -> None:
    port = free_port()  # nothing listens there
    began = time.monotonic()
    result = admin(standalone, "--controller", f"tcp://127.0.0.1:{port}", "--retry-timeout", "0.5", "scope", "list")
    assert time.monotonic() - began < 20
    line = one_error_line(result, 3)
    assert line.startswith(f"segstore admin: controller tcp://127.0.0.1:{port} unreachable after 0.5 s: ")


def test_a_controller_list_passes_over_a_dead_controller(standalone: StandaloneProcess) -> None:
    dead = free_port()  # nothing listens there
    listed = f"tcp://127.0.0.1:{dead},127.0.0.1:{standalone.controller_port}"
    began = time.monotonic()
    result = admin(standalone, "--controller", listed, "scope", "list", "--json")
    assert time.monotonic() - began < 20  # the dead one refused at once: no budget waited out
    assert "scopes" in result.json()  # type: ignore[operator]
    both_dead = f"tcp://127.0.0.1:{dead},127.0.0.1:{free_port()}"
    line = one_error_line(admin(standalone, "--controller", both_dead, "--retry-timeout", "0.5", "scope", "list"), 3)
    assert line.startswith(f"segstore admin: controllers {both_dead} unreachable after 0.5 s: last 127.0.0.1:")
    mixed = one_error_line(admin(standalone, "--controller", "tcp://a:1,tls://b:2", "scope", "list"), 2)
    assert mixed == (
        "segstore admin: --controller: controller uri tcp://a:1,tls://b:2: host 2 (tls://b:2): mixes schemes: "
        "one scheme for all controllers, expected tcp://host:port or tls://host:port, or a list "
        "tcp://host1:port1,host2:port2"
    )


async def test_authentication_and_permissions(standalone: StandaloneProcess) -> None:
    async with await manager(standalone) as streams:
        await streams.create_scope("view")
        await streams.create_stream("view", "v")
    wrong, anonymous, viewer_writes, viewer_reads = admin_all(
        standalone,
        (("scope", "list"), "intruder"),
        (("scope", "list"), None),
        (("stream", "create", "view/new"), "viewer"),
        (("stream", "list", "view", "--json"), "viewer"),
    )
    assert "listScopes" in one_error_line(wrong, 4)
    assert "listScopes" in one_error_line(anonymous, 4)
    assert "READ_UPDATE on prn::/scope:view" in one_error_line(viewer_writes, 4)
    assert viewer_reads.json() == {"scope": "view", "streams": ["v"]}
    stdin = admin(standalone, "--username", "viewer", "--password-stdin", "scope", "list", "--json",
                  user=None, stdin="viewer-secret\n")  # fmt: skip
    assert stdin.code == 0 and stdin.json() == {"scopes": ["view"]}  # what the viewer may see
    for result in (wrong, anonymous, viewer_writes, viewer_reads, stdin):
        assert not any(secret in result.out + result.err for secret, _ in USERS.values())
