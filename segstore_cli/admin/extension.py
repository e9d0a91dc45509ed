"""Calls of segstore's admin extension of the controller (``controller.rpc.admin``, gRPC service
``segstore.admin.v1.Admin``): what operators ask and ``Controller.proto`` cannot answer. A Pravega controller has no
such service (it answers UNIMPLEMENTED): :class:`NoAdminExtensionError` then, which a command may answer another
way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller_client.errors import ControllerFailureError, ScopeNotFoundError
from segstore_cli.admin.connection import Session
from segstore_cli.admin.errors import AdminError


class NoAdminExtensionError(AdminError):
    """The controller has no segstore admin extension (a Pravega controller?)."""


async def admin_extension(session: Session, method: str, request: dict[str, Any], **kwargs: Any) -> Any:
    """``method`` of the extension with the JSON object ``request``; its JSON answer. Raises NoAdminExtensionError,
    and what the controller client raises (``not_found``: the error a NOT_FOUND answer means)."""
    try:
        return await session.controller.admin_call(method, request, **kwargs)
    except ControllerFailureError as error:
        if "UNIMPLEMENTED" in str(error):
            raise NoAdminExtensionError(
                "this controller has no segstore admin extension (a Pravega controller?)"
            ) from None
        raise


@dataclass(frozen=True, slots=True)
class ScopeContents:
    """Everything a scope holds (what keeps it from being deleted), each kind sorted: every stream (internal ones
    too, e.g. a Java client's ``_RG<group>``), every reader group registered with the controller, every key-value
    table; ``hidden``: how many of each kind the caller may not see."""

    streams: tuple[str, ...]
    reader_groups: tuple[str, ...]
    key_value_tables: tuple[str, ...]
    hidden: dict[str, int]

    @property
    def empty(self) -> bool:
        return not (self.streams or self.reader_groups or self.key_value_tables or any(self.hidden.values()))


async def scope_contents(session: Session, scope: str) -> ScopeContents:
    """What ``scope`` holds (``ScopeContents``). Raises ScopeNotFoundError, NoAdminExtensionError."""
    found = await admin_extension(session, "ScopeContents", {"scope": scope}, not_found=ScopeNotFoundError(scope))
    hidden = found.get("hidden", {})
    return ScopeContents(
        tuple(found["streams"]),
        tuple(found["reader_groups"]),
        tuple(found["key_value_tables"]),
        {kind: int(count) for kind, count in hidden.items()},
    )
