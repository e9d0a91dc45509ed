"""Who is calling the controller, and may they (Pravega's ``AuthInterceptor`` + ``PasswordAuthHandler`` + the
checks of ``ControllerServiceImpl``).

A caller sends gRPC metadata ``authorization``:

- ``Basic base64(user:password)``: checked against the password file (``segment_store.auth.passwords``); the
  user's ACL decides;
- ``Bearer <token>``: a delegation token this controller (or another with the same signing key) issued; it
  grants exactly its claims (Spark executors work with the tokens their driver got, never the password).

Invariants: wrong credentials answer ``UNAUTHENTICATED`` on every RPC (the message never quotes a secret);
no credentials are enough only for RPCs that need nothing (``getControllerServerList``), else
``UNAUTHENTICATED``; a caller whose ACL lacks a permission gets ``PERMISSION_DENIED`` naming the resource and
the permission. A successful ``Basic`` check is remembered for ``cache_ttl_s`` (keyed by a hash of the header,
never the password) so that PBKDF2 does not run on every call; the password file is read again when it
changes (checked at most once a second), and the cache is then dropped.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import ControllerError
from controller.rpc.authorization import needs, token_permission
from segment_store.auth import acl as resources
from segment_store.auth.acl import Acl, AclEntry, Permission
from segment_store.auth.passwords import CredentialsError, PasswordFile, parse_basic
from segment_store.auth.tokens import TokenError, TokenSigner, TokenVerifier

CACHE_ENTRIES = 1024
RELOAD_CHECK_S = 1.0

caller: contextvars.ContextVar[Acl | None] = contextvars.ContextVar("caller", default=None)
"""The ACL of the caller of the RPC being served (None: authentication is off)."""


class AuthenticationError(ControllerError):
    """The caller's credentials are missing or wrong (gRPC ``UNAUTHENTICATED``)."""


class PermissionDeniedError(ControllerError):
    """The caller may not do this (gRPC ``PERMISSION_DENIED``)."""


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """The controller's authentication settings."""

    password_file: Path
    token_signing_key: str
    """Shared with every segment store (they verify the delegation tokens signed with it)."""
    token_ttl_s: int = 600
    cache_ttl_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.token_signing_key:
            raise ValueError("token_signing_key: must not be empty when authentication is on")
        if self.token_ttl_s <= 0:
            raise ValueError(f"token_ttl_s: must be positive, not {self.token_ttl_s}")


class ControllerAuth:
    def __init__(self, config: AuthConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self.signer = TokenSigner(config.token_signing_key, config.token_ttl_s, clock)
        self._verifier = TokenVerifier(config.token_signing_key, clock)
        self._passwords = PasswordFile.load(config.password_file)
        self._mtime = self._stat()
        self._checked_at = clock()
        self._cache: OrderedDict[bytes, tuple[Acl, float]] = OrderedDict()

    # ---- who ------------------------------------------------------------------------------------------------

    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> Acl | None:
        """The caller's ACL; None without credentials; AuthenticationError for wrong or malformed ones."""
        header = next((str(v) for k, v in metadata or () if k.lower() == "authorization"), None)
        if header is None:
            return None
        if header.startswith("Bearer "):
            return self._bearer(header[len("Bearer ") :].strip())
        key = hashlib.sha256(header.encode("utf-8", "surrogatepass")).digest()
        self._reload_if_changed()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            self._cache.move_to_end(key)
            return cached[0]
        try:
            user, password = parse_basic(header)
        except CredentialsError as exc:
            raise AuthenticationError(f"Authentication failed: {exc}") from None
        found = self._passwords.authenticate(user, password)
        if found is None:
            raise AuthenticationError(f"Authentication failed for user {user!r}")
        self._cache[key] = (found, now + self.config.cache_ttl_s)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return found

    def _bearer(self, token: str) -> Acl:
        try:
            granted = self._verifier.grants(token)
        except TokenError as exc:
            raise AuthenticationError(f"Authentication failed: {exc}") from None
        return Acl(tuple(AclEntry("prn::*" if r == "*" else r, p) for r, p in granted.items()))

    def _stat(self) -> float | None:
        try:
            return os.stat(self.config.password_file).st_mtime
        except OSError:
            return None

    def _reload_if_changed(self) -> None:
        now = self._clock()
        if now - self._checked_at < RELOAD_CHECK_S:
            return
        self._checked_at = now
        mtime = self._stat()
        if mtime is not None and mtime != self._mtime:
            self._passwords = PasswordFile.load(self.config.password_file)
            self._mtime = mtime
            self._cache.clear()

    # ---- may they -------------------------------------------------------------------------------------------

    def authorize(self, who: Acl | None, rpc: str, request: Any) -> None:
        """Raise unless ``who`` may call ``rpc`` with ``request`` (see ``authorization``)."""
        required = needs(rpc, request)
        if not required:
            return
        if who is None:
            raise AuthenticationError("Authentication failed: no credentials (authorization metadata)")
        for resource, permission in required:
            if not who.allows(resource, permission):
                raise PermissionDeniedError(f"Authorization failed: {permission.name} on {resource} is not granted")

    def delegation_token(self, scope: str, stream: str, access: int) -> str:
        """A token granting what ``access`` asks for on the stream (the caller was authorized for it)."""
        return self.signer.sign(resources.raw_stream(scope, stream), token_permission(access))


def visible(names: Iterable[str], resource: Callable[[str], str]) -> list[str]:
    """The names whose resource the caller may READ (all when authentication is off)."""
    who = caller.get()
    if who is None:
        return list(names)
    return [name for name in names if who.allows(resource(name), Permission.READ)]
