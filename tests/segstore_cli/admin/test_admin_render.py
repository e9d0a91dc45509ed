"""``segstore admin`` without a system: what users type is parsed or refused with a message, views render as
aligned tables and as JSON, errors map to their exit codes, options and the environment give the connection."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import uuid

import pytest
from rich.console import Console

from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerPermissionError,
    ControllerTlsError,
    ControllerUnavailableError,
    ScopeNotFoundError,
    StreamNotFoundError,
)
from controller_client.model import RetentionPolicy, ScalingPolicy, StreamConfiguration, segment_id
from segstore_cli.admin import parsing, render
from segstore_cli.admin.connection import Connection
from segstore_cli.admin.errors import (
    EXIT_FAILED,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    AdminError,
    exit_code_for,
    message_for,
)
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.streams import fit_ranges
from segstore_cli.admin.views import (
    EpochView,
    GroupStream,
    Names,
    Outcome,
    ReaderGroupList,
    ReaderGroupView,
    SegmentView,
    StreamView,
)
from segstore_shared.auth.tls import TlsConfigError

pytestmark = pytest.mark.unit

NOW_MS = 1_800_000_000_000
S2 = segment_id(2, 1)  # 2.#epoch.1
S3 = segment_id(3, 1)


# ---- parsing -----------------------------------------------------------------------------------------------------
def test_scoped_name_with_scope_and_name() -> None:
    assert parsing.scoped_name("shop/orders") == ("shop", "orders")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("orders", "name orders: expected SCOPE/NAME, e.g. shop/orders"),
        ("shop/", "name shop/: expected SCOPE/NAME, e.g. shop/orders"),
        ("/orders", "name /orders: expected SCOPE/NAME, e.g. shop/orders"),
        ("a/b/c", "name a/b/c: expected SCOPE/NAME, e.g. shop/orders"),
        ("shop/or ders", "name shop/or ders: not a valid name (letters, digits, . - and _ only)"),
        ("", "name: empty, expected SCOPE/NAME, e.g. shop/orders"),
    ],
)
def test_scoped_name_with_bad_text_is_refused_naming_it_without_quotes(text: str, problem: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parsing.scoped_name(text)
    assert str(raised.value) == problem


def test_scope_name_with_bad_text_is_refused_naming_it_without_quotes() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^scope sh\.op!: not a valid name \(letters"):
        parsing.scope_name("sh.op!")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^scope: empty, expected a name$"):
        parsing.scope_name("")


def test_segment_label_with_epochs_round_trips() -> None:
    assert parsing.segment_label(segment_id(3, 0)) == "3"
    assert parsing.segment_label(S2) == "2.#epoch.1"
    for segment in (0, segment_id(7, 0), S2, segment_id(12, 40)):
        assert parsing.segment_ref(parsing.segment_label(segment)) == segment


def test_segment_refs_with_repeats_or_junk_are_refused() -> None:
    assert parsing.segment_refs("0, 2.#epoch.1") == [0, S2]
    with pytest.raises(argparse.ArgumentTypeError, match="named twice"):
        parsing.segment_refs("1,1")
    with pytest.raises(argparse.ArgumentTypeError, match="segment number"):
        parsing.segment_refs("x")


def test_qualified_segment_with_and_without_epoch() -> None:
    assert parsing.qualified_segment("shop/orders/3").segment_id == 3
    assert parsing.qualified_segment("shop/orders/2.#epoch.1").segment_id == S2
    with pytest.raises(argparse.ArgumentTypeError, match="SCOPE/STREAM/NUMBER"):
        parsing.qualified_segment("shop/orders")


def test_key_ranges_with_contiguous_ranges() -> None:
    assert parsing.key_ranges("0-0.5, 0.5-1") == [(0.0, 0.5), (0.5, 1.0)]


@pytest.mark.parametrize(
    ("text", "problem"),
    [("0-0.4,0.5-1", "must start where"), ("0.5-0.2", "START < END"), ("0-1.5", "END <= 1"), ("a-b", "START-END")],
)
def test_key_ranges_with_gaps_or_bad_bounds_are_refused(text: str, problem: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=problem):
        parsing.key_ranges(text)


def test_stream_cut_with_labels_as_describe_shows_them() -> None:
    assert parsing.stream_cut("0=512, 2.#epoch.1=0") == {0: 512, S2: 0}
    with pytest.raises(argparse.ArgumentTypeError, match="SEGMENT=OFFSET"):
        parsing.stream_cut("0:512")
    with pytest.raises(argparse.ArgumentTypeError, match="named twice"):
        parsing.stream_cut("0=1,0=2")


@pytest.mark.parametrize(
    ("text", "ms"), [("250", 250), ("500ms", 500), ("30s", 30_000), ("1.5h", 5_400_000), ("7d", 604_800_000)]
)
def test_duration_with_units(text: str, ms: int) -> None:
    assert parsing.duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "size"), [("512", 512), ("64KiB", 65_536), ("10MB", 10_000_000), ("1.5gib", 1_610_612_736)]
)
def test_size_with_decimal_and_binary_units(text: str, size: int) -> None:
    assert parsing.size_bytes(text) == size


def test_duration_and_size_with_junk_are_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="unit"):
        parsing.duration_ms("7 years")
    with pytest.raises(argparse.ArgumentTypeError, match="KiB"):
        parsing.size_bytes("10 parsecs")


def test_timestamp_with_every_form() -> None:
    assert parsing.timestamp_ms("1700000000000", NOW_MS) == 1_700_000_000_000
    assert parsing.timestamp_ms("1h ago", NOW_MS) == NOW_MS - 3_600_000
    assert parsing.timestamp_ms("-15m", NOW_MS) == NOW_MS - 900_000
    eight = int(datetime.datetime(2027, 1, 15, 8, tzinfo=datetime.UTC).timestamp() * 1000)
    assert parsing.timestamp_ms("2027-01-15T08:00:00Z", NOW_MS) == eight
    assert parsing.timestamp_ms("2027-01-15T08:00", NOW_MS) == eight  # UTC when it names no offset
    assert parsing.timestamp_ms("2027-01-15T10:00:00+02:00", NOW_MS) == eight
    with pytest.raises(argparse.ArgumentTypeError, match="ISO 8601"):
        parsing.timestamp_ms("yesterday", NOW_MS)


def test_fit_ranges_with_rounded_boundaries_snaps_to_the_exact_keys() -> None:
    third = 1 / 3
    assert fit_ranges([(0.0, third)], [(0.0, 0.1), (0.1, 0.3333)]) == [(0.0, 0.1), (0.1, third)]
    assert fit_ranges([(0.0, third), (third, 2 * third)], [(0.0, 0.6667)]) == [(0.0, 2 * third)]


def test_fit_ranges_with_other_keys_is_none() -> None:
    assert fit_ranges([(0.0, 0.5)], [(0.5, 0.75), (0.75, 1.0)]) is None
    assert fit_ranges([(0.0, 0.5)], [(0.0, 0.4)]) is None


# ---- rendering ---------------------------------------------------------------------------------------------------
def stream_view() -> StreamView:
    config = StreamConfiguration(ScalingPolicy.fixed(2), RetentionPolicy.by_time_ms(604_800_000), tags=("demo",))
    old = SegmentView(0, (0.0, 0.5), 0, 5_400, True, "127.0.0.1:12345")
    active = (
        SegmentView(1, (0.5, 1.0), 100, 12_345_678, False, "127.0.0.1:12345"),
        SegmentView(S2, (0.0, 0.25), 0, 0, False, "127.0.0.1:12346"),
        SegmentView(S3, (0.25, 0.5), 0, 42, False, "127.0.0.1:12346"),
    )
    history = (
        EpochView(0, {0: (0.0, 0.5), 1: (0.5, 1.0)}, (), (0, 1)),
        EpochView(1, {1: (0.5, 1.0), S2: (0.0, 0.25), S3: (0.25, 0.5)}, (0,), (S2, S3)),
    )
    return StreamView(
        scope="shop",
        stream="orders",
        sealed=False,
        config=config,
        active=active,
        retained=(old, *active),
        head={0: 400, 1: 100},
        tail={1: 12_345_678, S2: 0, S3: 42},
        subscribers=("shop/billing",),
        current_epoch=1,
        history=history,
    )


def test_stream_view_retained_bytes_with_head_above_segment_start() -> None:
    assert stream_view().retained_bytes == (5_400 - 400) + (12_345_678 - 100) + 0 + 42


def test_stream_view_as_text_with_aligned_columns() -> None:
    text = render.to_text(stream_view())
    lines = text.splitlines()
    assert lines[0] == "stream shop/orders: active, epoch 1"
    assert "retention    time: at least 7d" in lines
    assert "head         0=400, 1=100" in lines
    assert "tail         1=12345678, 2.#epoch.1=0, 3.#epoch.1=42" in lines
    assert all(line == line.rstrip() for line in lines)
    header = next(i for i, line in enumerate(lines) if line.startswith("SEGMENT "))
    rows = lines[header + 1 : header + 5]
    assert [row.split()[0] for row in rows] == ["0", "1", "2.#epoch.1", "3.#epoch.1"]
    for column in ("KEY RANGE", "STATE", "START", "LENGTH", "BYTES", "ENDPOINT"):
        at = lines[header].index(column)
        assert all(row[at - 1] == " " and row[at] != " " for row in rows), column  # every row starts it there
    assert "12,345,678" in rows[1] and "sealed" in rows[0] and "active" in rows[1]
    assert lines[-1].split()[:4] == ["1", "3", "0", "2.#epoch.1"]  # epoch 1: 3 segments, sealed 0, created...


def test_stream_view_as_json_names_segments_three_ways() -> None:
    document = json.loads(render.dumps(stream_view()))
    assert document["retained_bytes"] == stream_view().retained_bytes
    assert document["config"]["retention"] == {"type": "TIME", "min": 604_800_000, "max": None}
    assert document["head"] == [
        {"segment": "0", "segment_id": 0, "offset": 400},
        {"segment": "1", "segment_id": 1, "offset": 100},
    ]
    second = document["segments"][1]
    assert second["segment"] == "2.#epoch.1" and second["segment_id"] == S2
    assert second["name"] == "shop/orders/2.#epoch.1" and second["key_range"] == [0.0, 0.25]
    assert [s["state"] for s in document["retained_segments"]] == ["sealed", "active", "active", "active"]
    assert document["history"][1]["sealed"] == ["0"] and document["history"][1]["created"] == [
        "2.#epoch.1",
        "3.#epoch.1",
    ]


def test_outcome_of_a_scale_as_text_and_json() -> None:
    outcome = Outcome(
        "scaled", "stream shop/orders", details={"epoch": 1, "sealed": [0], "created": {S2: (0.0, 0.25)}, "done": True}
    )
    assert render.to_text(outcome) == "stream shop/orders scaled (sealed 0; created 2.#epoch.1 [0, 0.25); epoch 1)"
    assert json.loads(render.dumps(outcome)) == {
        "action": "scaled",
        "target": "stream shop/orders",
        "changed": True,
        "epoch": 1,
        "sealed": ["0"],
        "created": [{"segment": "2.#epoch.1", "key_range": [0.0, 0.25]}],
        "done": True,
    }


def test_outcome_of_a_large_scale_as_text_is_shortened() -> None:
    created = {segment_id(n, 1): (n / 16, (n + 1) / 16) for n in range(16)}
    text = render.to_text(Outcome("scaled", "stream s/t", details={"sealed": [0], "created": created}))
    assert (
        text == "stream s/t scaled (sealed 0; created 16 segments: 0.#epoch.1 [0, 0.0625) ... 15.#epoch.1 [0.9375, 1))"
    )


def test_activity_with_a_terminal_shows_the_step_and_without_one_nothing() -> None:
    shown = io.StringIO()
    with Activity(Console(file=shown, force_terminal=True)).step("scaling s/t") as update:
        update("scaling s/t: still")
    assert "scaling s/t" in shown.getvalue()
    piped = io.StringIO()
    with Activity(Console(file=piped)).step("scaling s/t"):
        pass
    assert piped.getvalue() == ""


def test_outcome_with_nothing_to_do_as_text() -> None:
    exists = Outcome("exists", "scope shop", changed=False)
    assert render.to_text(exists) == "scope shop exists already"
    assert json.loads(render.dumps(exists))["action"] == "exists"


def test_names_as_table_and_when_empty() -> None:
    assert render.to_text(Names("scopes", ("a", "shop"))).splitlines() == ["SCOPE", "a", "shop"]
    assert render.to_text(Names("streams", (), scope="shop")) == "no streams in scope shop"
    assert json.loads(render.dumps(Names("streams", ("x",), scope="shop"))) == {"scope": "shop", "streams": ["x"]}


def test_reader_group_list_says_what_it_cannot_list() -> None:
    assert "no call listing every reader group" in render.to_text(ReaderGroupList("shop", ()))
    assert json.loads(render.dumps(ReaderGroupList("shop", ())))["complete"] is False


def test_reader_group_view_with_bounded_stream_and_no_positions() -> None:
    group = ReaderGroupView(
        scope="shop",
        name="billing",
        group_id=str(uuid.UUID(int=7)),
        generation=2,
        retention="AUTOMATIC",
        refresh_ms=3_000,
        checkpoint_interval_ms=30_000,
        max_outstanding_checkpoints=3,
        streams=(GroupStream("shop/orders", {}, {0: 99}, True), GroupStream("shop/returns", {1: 5}, None, False)),
    )
    lines = render.to_text(group).splitlines()
    assert "checkpoints  every 30s, at most 3 outstanding" in lines
    assert ["shop/orders", "head", "0=99", "yes"] in [line.split() for line in lines]
    assert ["shop/returns", "1=5", "tail", "no"] in [line.split() for line in lines]
    assert "no reader positions" in lines[-1]
    document = json.loads(render.dumps(group))
    assert document["readers"] is None and document["streams"][0]["start"] == []
    assert document["streams"][0]["end"] == [{"segment": "0", "segment_id": 0, "offset": 99}]


@pytest.mark.parametrize(
    ("ms", "text"), [(0, "0"), (1_500, "1500ms"), (90_000, "1m30s"), (604_800_000, "7d"), (93_600_000, "1d2h")]
)
def test_format_duration(ms: int, text: str) -> None:
    assert render.format_duration_ms(ms) == text


def test_format_bytes_and_scaling() -> None:
    assert render.format_bytes(1023) == "1,023 bytes"
    assert render.format_bytes(10 * 2**20) == "10,485,760 bytes (10.0 MiB)"
    assert render.format_scaling(ScalingPolicy.by_event_rate(100, 2, 3)) == (
        "by rate: 100 events/s per segment, factor 2, min 3 segments"
    )


# ---- errors and connection ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "code"),
    [
        (StreamNotFoundError("s", "t"), EXIT_FAILED),
        (ScopeNotFoundError("s"), EXIT_FAILED),
        (ControllerUnavailableError("down"), EXIT_UNREACHABLE),
        (ControllerTlsError("not trusted"), EXIT_UNREACHABLE),
        (ControllerAuthenticationError("who?"), EXIT_REFUSED),
        (ControllerPermissionError("no"), EXIT_REFUSED),
        (TlsConfigError("trust_store", "ca.pem", "no such file"), EXIT_USAGE),
        (AdminError("bad", EXIT_USAGE), EXIT_USAGE),
        (ValueError("anything else"), EXIT_FAILED),
    ],
)
def test_exit_code_for_each_kind_of_error(error: Exception, code: int) -> None:
    assert exit_code_for(error) == code


def test_message_for_errors_is_one_line_naming_the_flag() -> None:
    assert message_for(StreamNotFoundError("s1", "missing")) == "stream s1/missing does not exist"
    assert message_for(TlsConfigError("trust_store", "ca.pem", "no such file")) == "--trust-store ca.pem: no such file"
    assert message_for(ControllerUnavailableError("a\nb")) == "a b"  # it names the controller and what to check
    assert "\n" not in message_for(ControllerUnavailableError("a\nb"))


def namespace(**values: object) -> argparse.Namespace:
    defaults = {"controller": None, "trust_store": None, "client_cert": None, "client_key": None, "username": None}
    return argparse.Namespace(
        **{**defaults, "password_stdin": False, "retry_timeout": 10.0, "rpc_timeout": 60.0, **values}
    )


def test_connection_with_options_winning_over_the_environment() -> None:
    environ = {"SEGSTORE_CONTROLLER": "tcp://env:1", "SEGSTORE_USERNAME": "env-user", "SEGSTORE_PASSWORD": "pw"}
    connection = Connection.from_args(namespace(username="admin"), environ, io.StringIO())
    assert (connection.controller, connection.username, connection.password) == ("tcp://env:1", "admin", "pw")
    assert "pw" not in repr(connection)
    config = connection.client_config()
    assert config.call_metadata() is not None and config.retry_timeout_s == 10.0


def test_connection_with_password_from_stdin() -> None:
    args = namespace(username="admin", password_stdin=True, controller="tls://localhost:9090")
    connection = Connection.from_args(args, {}, io.StringIO("s3cret\nrest\n"))
    assert connection.password == "s3cret" and connection.controller == "tls://localhost:9090"


@pytest.mark.parametrize(
    ("args", "environ", "problem"),
    [
        (namespace(username="admin"), {}, "no password"),
        (namespace(), {"SEGSTORE_PASSWORD": "pw"}, "without a user"),
        (namespace(controller="http://x:1"), {}, "--controller"),
        (namespace(client_cert="c.pem"), {}, "--client-key"),
        (namespace(username="a", password_stdin=True), {}, "standard input held no password"),
    ],
)
def test_connection_with_options_that_do_not_fit_is_a_usage_error(
    args: argparse.Namespace, environ: dict[str, str], problem: str
) -> None:
    with pytest.raises(AdminError, match=problem) as raised:
        Connection.from_args(args, environ, io.StringIO(""))
    assert raised.value.exit_code == EXIT_USAGE
