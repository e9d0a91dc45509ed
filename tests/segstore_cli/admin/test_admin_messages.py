"""``segstore admin``'s words, without a system: one vocabulary of segment states (``segment info`` as ``stream
describe``), names in messages without quotes, TLS settings named by their flags, a description in every ``--help``,
and the reader group listing with and without the controller's admin extension."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from rich.console import Console

from controller_client.errors import (
    ControllerFailureError,
    ControllerTlsError,
    ReaderGroupNotFoundError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
)
from segstore_cli.admin import render
from segstore_cli.admin.connection import Session
from segstore_cli.admin.errors import AdminError, message_for, plain
from segstore_cli.admin.groups import list_groups
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.streams import delete_scope
from segstore_cli.admin.views import ACTIVE, SEALED, ReaderGroupEntry, ReaderGroupList, SegmentInfoView, segment_state
from segstore_cli.main import build_parser
from segstore_shared.auth.tls import TlsConfigError

pytestmark = pytest.mark.unit


def segment_info(state: str, key_range: tuple[float, float] | None) -> SegmentInfoView:
    return SegmentInfoView(
        "shop/orders/1.#epoch.0", "shop", "orders", 1, 0, 64_800, state == SEALED, 0, "127.0.0.1:1", key_range, state
    )


def test_a_segment_is_active_or_sealed_in_every_view() -> None:
    assert (ACTIVE, SEALED) == ("active", "sealed")
    assert segment_state(active=True, sealed=False) == ACTIVE
    assert segment_state(active=True, sealed=True) == SEALED  # sealed at the segment store, not yet out of the epoch
    assert segment_state(active=False, sealed=False) == SEALED
    for state, key_range in ((ACTIVE, (0.5, 1.0)), (SEALED, None)):
        view = segment_info(state, key_range)
        assert f"state        {state}" in render.to_text(view).splitlines()
        assert json.loads(render.dumps(view))["state"] == state


def test_names_in_messages_have_no_quotes() -> None:
    assert message_for(ScopeNotFoundError("nowhere")) == "scope nowhere does not exist"
    assert message_for(ReaderGroupNotFoundError("shop", "nope")) == "reader group shop/nope does not exist"
    assert plain("argument ACTION: invalid choice: 'nope' (choose from 'list', 'create')") == (
        "argument ACTION: invalid choice: nope (choose from list, create)"
    )
    assert plain("the controller's certificate does not name host 'ctl': it's not") == (
        "the controller's certificate does not name host ctl: it's not"
    )


def test_tls_settings_are_named_by_their_flags() -> None:
    mismatch = TlsConfigError(
        "client_key", "/pem/client_key.pem", "does not belong to the certificate in client_cert /c.pem"
    )
    assert (
        message_for(mismatch)
        == "--client-key /pem/client_key.pem: does not belong to the certificate in --client-cert /c.pem"
    )
    refused = ControllerTlsError("listScopes: TLS to controller ctl:9090: it requires a client certificate "
                                 "(set client_cert and client_key)")  # fmt: skip
    assert message_for(refused).endswith("it requires a client certificate (set --client-cert and --client-key)")
    assert message_for(TlsConfigError("tls_cert", "c.pem", "no such file")) == "--tls-cert c.pem: no such file"
    assert message_for(TlsConfigError("tls_key", None, "--tls-cert was given without its private key (--tls-key)")) == (
        "--tls-key: --tls-cert was given without its private key (--tls-key)"
    )


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_admin_object_and_command_has_a_description_in_its_help() -> None:
    admin = _subparsers(build_parser())["admin"]
    seen = []
    for noun, parser in _subparsers(admin).items():
        for verb, command in [("", parser), *_subparsers(parser).items()]:
            name = f"{noun} {verb}".strip()
            seen.append(name)
            assert command.description and len(command.description) > 10, name
            assert command.description in command.format_help(), name
    assert {"scope", "stream", "reader-group", "segment", "reader-group delete", "scope delete"} <= set(seen)


def test_the_reader_group_listing_with_every_group_shows_their_retention() -> None:
    listing = ReaderGroupList(
        "shop",
        (ReaderGroupEntry("shop", "audit", ("shop/orders",), "NONE"),
         ReaderGroupEntry("shop", "billing", ("shop/orders",), "AUTOMATIC")),
        complete=True,
        hidden=1,
    )  # fmt: skip
    assert render.to_text(listing).splitlines() == [
        "READER GROUP  RETENTION  STREAMS",
        "shop/audit    NONE       shop/orders",
        "shop/billing  AUTOMATIC  shop/orders",
        "note: 1 more in scope shop that you may not see",
    ]
    document = json.loads(render.dumps(listing))
    assert document["complete"] is True and document["hidden"] == 1 and "note" not in document
    assert document["reader_groups"][0] == {"scope": "shop", "name": "audit", "streams": ["shop/orders"],
                                            "retention": "NONE"}  # fmt: skip
    assert render.to_text(ReaderGroupList("shop", (), complete=True)) == "no reader groups in scope shop"


class PravegaController:
    """A controller without segstore's admin extension (it answers UNIMPLEMENTED), one scope ``shop`` holding the
    stream ``orders`` with the subscriber ``shop/billing``."""

    async def admin_call(self, method: str, request: dict[str, object], **kwargs: object) -> object:
        raise ControllerFailureError(f"admin{method}: UNIMPLEMENTED: Method not found")

    async def list_subscribers(self, scope: str, stream: str) -> list[str]:
        return ["shop/billing"]

    async def scope_exists(self, scope: str) -> bool:
        return True

    async def delete_scope(self, scope: str) -> None:
        raise ScopeNotEmptyError(scope)


class Streams:
    async def list_streams(self, scope: str) -> list[str]:
        return ["orders"]


async def test_without_the_admin_extension_the_listing_and_the_refusal_say_less() -> None:
    session = Session(PravegaController(), Streams())  # type: ignore[arg-type]
    listing = await list_groups(session, argparse.Namespace(scope="shop"), Activity(Console(file=io.StringIO())))
    assert listing == ReaderGroupList("shop", (ReaderGroupEntry("shop", "billing", ("shop/orders",)),))
    assert "this controller has no call listing every reader group" in render.to_text(listing)
    with pytest.raises(AdminError) as refused:
        await delete_scope(session, argparse.Namespace(scope="shop"), Activity(Console(file=io.StringIO())))
    assert str(refused.value) == (
        "scope shop is not empty: delete its streams, reader groups and key-value tables first"
    )
    assert refused.value.exit_code == 1
