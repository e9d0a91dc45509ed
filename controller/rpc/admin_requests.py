"""The JSON requests and responses of segstore's admin extension (:mod:`controller.rpc.admin`).

Kept apart from the methods so that the authorization table (:mod:`controller.rpc.authorization`) can name the
stream an admin request is about without importing the RPCs it authorizes. Imports only the client library's
model (name validation) and the standard library.
"""

from __future__ import annotations

import json
from typing import Any

from controller_client.model import InvalidModelError, validate_scope_name, validate_stream_name


def decode_request(data: bytes) -> dict[str, Any]:
    """A request's JSON object; InvalidModelError (INVALID_ARGUMENT) for anything else."""
    try:
        found = json.loads(data or b"{}")
    except (UnicodeDecodeError, ValueError):
        raise InvalidModelError("admin request: not a JSON object") from None
    if not isinstance(found, dict):
        raise InvalidModelError("admin request: not a JSON object")
    return found


def encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def stream_of(request: dict[str, Any]) -> tuple[str, str]:
    scope, stream = request.get("scope"), request.get("stream")
    if not isinstance(scope, str) or not isinstance(stream, str):
        raise InvalidModelError("admin request: 'scope' and 'stream' must be strings")
    return validate_scope_name(scope), validate_stream_name(stream)


def scope_of(request: dict[str, Any]) -> str:
    scope = request.get("scope")
    if not isinstance(scope, str):
        raise InvalidModelError("admin request: 'scope' must be a string")
    return validate_scope_name(scope)
