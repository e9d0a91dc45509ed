"""Who is calling the controller, and may they (Pravega's ``AuthInterceptor`` + ``PasswordAuthHandler`` + the
checks of ``ControllerServiceImpl``).

A caller sends gRPC metadata ``authorization``:

- ``Basic base64(user:password)``: checked against the password file (``segstore_shared.auth.passwords``); the
  user's ACL decides;
- ``Bearer <token>``: a delegation token this controller (or another with the same signing key) issued; it
  grants exactly its claims (Spark executors work with the tokens their driver got, never the password).

Renewal (segstore's, like Hadoop's and Kafka's delegation tokens): a token issued to a user carries the user
and a renewal bound, ``token_max_lifetime_s`` (default 7 days) after the user logged in. Shown as ``Bearer``
to ``getDelegationToken`` — even after its ``exp``, up to that bound — it buys a fresh token for what it
grants, with the same bound (a chain of renewals never outlives it), and only while the user still exists
and their ACL still allows it (the password file is the authority; removing a user or a permission stops
renewals at once). Every other RPC refuses an expired token. A long Spark job's executors renew this way.

Invariants: wrong credentials answer ``UNAUTHENTICATED`` on every RPC (the message never quotes a secret);
no credentials are enough only for RPCs that need nothing (``getControllerServerList``), else
``UNAUTHENTICATED``; a caller whose ACL lacks a permission gets ``PERMISSION_DENIED`` naming the resource and
the permission. A successful ``Basic`` check is remembered for ``cache_ttl_s`` (keyed by a hash of the header,
never the password) so that PBKDF2 does not run on every call; the password file is read again when it
changes (checked at most once a second), and the cache is then dropped.

Password checks (PBKDF2, up to a second each at 600,000 iterations) run off the event loop, in ``login_threads``
threads, at most ``login_queue`` at once (more: ``UNAVAILABLE``, which clients retry), and concurrent checks of
one header share one run. Before a check runs it takes a token from the user's and from the peer address's
bucket (:mod:`controller.rpc.login_limits`): an empty one refuses the login at once, ``UNAUTHENTICATED`` with
``too many failed logins ... retry in N s``. Remembered sessions and Bearer tokens are never limited, so a
flood of wrong passwords neither blocks the controller nor delays the callers it already knows.

Below the RPC groups and :mod:`controller.rpc.handling`: imports :mod:`controller.rpc.authorization`, the
configuration (:class:`~controller.config.AuthConfig`), the controller's errors and :mod:`segstore_shared.auth`.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from controller.config import AuthConfig
from controller.errors import ControllerError
from controller.rpc.authorization import describe, needs, satisfied, token_permission
from controller.rpc.login_limits import LoginLimits, peer_address
from segstore_shared.auth import acl as resources
from segstore_shared.auth.acl import Acl, AclEntry, Permission
from segstore_shared.auth.passwords import CredentialsError, PasswordFile, parse_basic
from segstore_shared.auth.tokens import TokenError, TokenSigner, TokenVerifier

CACHE_ENTRIES = 1024
RELOAD_CHECK_S = 1.0


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: what their credentials grant, and what a token issued to them may say."""

    acl: Acl
    user: str | None
    """The user who logged in, or to whom the shown token was issued (None: a token naming nobody)."""
    token_bound: int | None = None
    """For a caller showing a token: when its renewals end (tokens bought with it end then too)."""
    owner_acl: Acl | None = None
    """For a token shown for renewal: its user's ACL now, which must allow what is asked as well."""

    @property
    def showed_token(self) -> bool:
        return self.token_bound is not None or self.owner_acl is not None


caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)
"""The caller of the RPC being served (None: authentication is off)."""


class AuthenticationError(ControllerError):
    """The caller's credentials are missing or wrong (gRPC ``UNAUTHENTICATED``)."""


class PermissionDeniedError(ControllerError):
    """The caller may not do this (gRPC ``PERMISSION_DENIED``)."""


class LoginBusyError(ControllerError):
    """Too many password checks are running or waiting (gRPC ``UNAVAILABLE``: try again)."""

    retriable = True


class ControllerAuth:
    def __init__(
        self,
        config: AuthConfig,
        clock: Callable[[], float] = time.time,
        limits_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._clock = clock
        self._limits = LoginLimits(config.login_failures_burst, config.login_failures_per_s, limits_clock)
        self._executor: ThreadPoolExecutor | None = None  # made on the first password check
        self._checks: dict[bytes, asyncio.Future[Caller]] = {}  # running checks, by header hash
        self.signer = TokenSigner(config.token_signing_key, config.token_ttl_s, clock)
        self._verifier = TokenVerifier(config.token_signing_key, clock)
        self._passwords = PasswordFile.load(config.password_file)
        self._mtime = self._stat()
        self._checked_at = clock()
        self._cache: OrderedDict[bytes, tuple[Caller, float]] = OrderedDict()

    # ---- who ------------------------------------------------------------------------------------------------

    async def authenticate(
        self, metadata: Iterable[tuple[str, Any]] | None, rpc: str = "", peer: str = ""
    ) -> Caller | None:
        """The caller; None without credentials; AuthenticationError for wrong or malformed ones (or a login
        refused for too many failures of its user or its ``peer``, gRPC's ``context.peer()``), LoginBusyError when
        too many are being checked. A token shown to ``getDelegationToken`` is checked for renewal (see the module
        docstring)."""
        header = next((str(v) for k, v in metadata or () if k.lower() == "authorization"), None)
        if header is None:
            return None
        if header.startswith("Bearer "):
            token = header[len("Bearer ") :].strip()
            return self._renewing(token) if rpc == "getDelegationToken" else self._bearer(token)
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
        running = self._checks.get(key)
        if running is not None:  # the same header is being checked: share that check
            return await asyncio.shield(running)
        keys = [f"user:{user}"] + ([f"peer:{peer_address(peer)}"] if peer else [])
        wait_s = self._limits.take(keys)
        if wait_s > 0:
            raise AuthenticationError(
                f"Authentication failed for user {user!r}: too many failed logins of this user or from this "
                f"address; retry in {math.ceil(wait_s)} s"
            )
        if len(self._checks) >= self.config.login_queue:
            self._limits.give_back(keys)
            raise LoginBusyError(f"Authentication not checked: {len(self._checks)} logins are being checked; retry")
        check = asyncio.get_running_loop().create_future()
        self._checks[key] = check
        passwords = self._passwords
        try:
            found = await self._check(passwords, user, password)
        except asyncio.CancelledError:  # its caller went away: the others sharing the check try again
            check.set_exception(LoginBusyError("Authentication not checked: the check was cancelled; retry"))
            raise
        except BaseException as error:
            check.set_exception(error)
            raise
        else:
            check.set_result(found)
            self._limits.give_back(keys)  # only failures (and checks cut short) count
        finally:
            del self._checks[key]
            check.exception()  # retrieved: asyncio must not log it when nobody else was waiting for it
        if self._passwords is passwords:  # not remembered if the file changed meanwhile (the next call checks again)
            self._cache[key] = (found, self._clock() + self.config.cache_ttl_s)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return found

    async def _check(self, passwords: PasswordFile, user: str, password: str) -> Caller:
        """PBKDF2 in a thread of its own (hashlib releases the GIL): the event loop serves other calls meanwhile."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.config.login_threads, thread_name_prefix="controller-login")
        acl = await asyncio.get_running_loop().run_in_executor(self._executor, passwords.authenticate, user, password)
        if acl is None:
            raise AuthenticationError(f"Authentication failed for user {user!r}")
        return Caller(acl, user)

    def close(self) -> None:
        """Stop the password-check threads (a check still running finishes first)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def _bearer(self, token: str) -> Caller:
        try:
            granted = self._verifier.grants(token)
        except TokenError as exc:
            raise AuthenticationError(f"Authentication failed: {exc}") from None
        return Caller(_token_acl(granted), None)

    def _renewing(self, token: str) -> Caller:
        try:
            renewal = self._verifier.renewal(token)
        except TokenError as exc:
            raise AuthenticationError(f"Authentication failed: {exc}") from None
        owner_acl = None
        if renewal.user is not None:
            self._reload_if_changed()
            entry = self._passwords.users.get(renewal.user)
            if entry is None:
                raise AuthenticationError(f"Authentication failed: user {renewal.user!r} of the token is gone")
            owner_acl = entry.acl
        bound = renewal.renew_until if renewal.renew_until is not None else 0
        return Caller(_token_acl(renewal.grants), renewal.user, token_bound=bound, owner_acl=owner_acl)

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

    def authorize(self, who: Caller | None, rpc: str, request: Any) -> None:
        """Raise unless ``who`` may call ``rpc`` with ``request`` (see ``authorization``)."""
        required = needs(rpc, request)
        if not required:
            return
        if who is None:
            raise AuthenticationError("Authentication failed: no credentials (authorization metadata)")
        for need in required:
            if not satisfied(who.acl, need):
                raise PermissionDeniedError(f"Authorization failed: {describe(need)} is not granted")
            if who.owner_acl is not None and not satisfied(who.owner_acl, need):
                raise PermissionDeniedError(
                    f"Authorization failed: {describe(need)} is no longer granted to {who.user!r}"
                )

    def delegation_token(self, scope: str, stream: str, access: int) -> str:
        """A token granting what ``access`` asks for on the stream (the caller was authorized for it): for a
        user, renewable for ``token_max_lifetime_s``; for a token, renewable as long as that token."""
        who = caller.get()
        bound: int | None = None
        if who is not None and who.showed_token:
            bound = who.token_bound or None
        elif self.config.token_max_lifetime_s > 0:
            bound = int(self._clock()) + self.config.token_max_lifetime_s
        user = who.user if who is not None else None
        return self.signer.sign(
            resources.raw_stream(scope, stream), token_permission(access), user=user, renew_until=bound
        )


def _token_acl(granted: dict[str, Permission]) -> Acl:
    return Acl(tuple(AclEntry("prn::*" if r == "*" else r, p) for r, p in granted.items()))


def visible(names: Iterable[str], resource: Callable[[str], str]) -> list[str]:
    """The names whose resource the caller may READ (all when authentication is off)."""
    who = caller.get()
    if who is None:
        return list(names)
    return [name for name in names if who.acl.allows(resource(name), Permission.READ)]
