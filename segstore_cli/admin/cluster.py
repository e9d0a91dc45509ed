"""``containers`` (which segment store runs which container) and ``transactions SCOPE/STREAM`` (its open ones):
answered by segstore's admin extension of the controller (:mod:`.extension`), which Pravega's controller does not
have (it answers UNIMPLEMENTED: the command then says so)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from controller_client.errors import StreamNotFoundError
from segstore_cli.admin.connection import Session
from segstore_cli.admin.extension import admin_extension
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.render import _table, to_human, to_json


@dataclass(frozen=True, slots=True)
class ContainersView:
    container_count: int
    hosts: dict[str, list[int]]


@dataclass(frozen=True, slots=True)
class TransactionsView:
    scope: str
    stream: str
    transactions: list[dict[str, Any]]


async def list_containers(session: Session, args: argparse.Namespace, activity: Activity) -> ContainersView:
    """The container assignment the controllers follow."""
    found = await admin_extension(session, "ContainerAssignment", {})
    return ContainersView(int(found["container_count"]), {h: list(ids) for h, ids in found["hosts"].items()})


async def list_transactions(session: Session, args: argparse.Namespace, activity: Activity) -> TransactionsView:
    """The stream's active transactions (open, committing, aborting)."""
    scope, stream = args.stream
    request = {"scope": scope, "stream": stream}
    found = await admin_extension(session, "OpenTransactions", request, not_found=StreamNotFoundError(scope, stream))
    return TransactionsView(scope, stream, list(found["transactions"]))


@to_json.register
def _(view: ContainersView) -> object:
    return {"container_count": view.container_count, "hosts": view.hosts}


@to_json.register
def _(view: TransactionsView) -> object:
    return {"scope": view.scope, "stream": view.stream, "transactions": view.transactions}


@to_human.register
def _(view: ContainersView) -> list[RenderableType]:
    table = _table("SEGMENT STORE", "CONTAINERS")
    for host, ids in sorted(view.hosts.items()):
        table.add_row(host, ", ".join(str(i) for i in ids))
    assigned = sum(len(ids) for ids in view.hosts.values())
    summary = Text(f"{assigned} of {view.container_count} containers assigned")
    return [table, summary] if view.hosts else [Text("no container is assigned (no segment store is up)")]


@to_human.register
def _(view: TransactionsView) -> list[RenderableType]:
    if not view.transactions:
        return [Text(f"no open transactions in {view.scope}/{view.stream}")]
    table = _table("TRANSACTION", "STATUS", "EPOCH", "LEASE EXPIRES (ms)", "WRITER")
    for txn in view.transactions:
        table.add_row(txn["id"], txn["status"], str(txn["epoch"]), str(txn["lease_expiry_ms"]), txn["writer_id"])
    return [table]
