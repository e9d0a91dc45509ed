"""Authentication settings of the server processes, from flags or the environment (flags win).

========================================  =================================  =====================================
setting                                   environment                        flag
========================================  =================================  =====================================
password file (controller, standalone)    ``SEGSTORE_AUTH_PASSWORD_FILE``    ``--auth-password-file PATH``
token signing key (every process)         ``SEGSTORE_AUTH_TOKEN_SIGNING_KEY`` ``--auth-token-signing-key-file PATH``
token lifetime, seconds (controller)      ``SEGSTORE_AUTH_TOKEN_TTL_S``      ``--auth-token-ttl-s N``
token renewal bound, seconds (controller) ``SEGSTORE_AUTH_TOKEN_MAX_LIFETIME_S`` ``--auth-token-max-lifetime-s N``
========================================  =================================  =====================================

A token lives ``--auth-token-ttl-s`` (600); a client holding one exchanges it for a fresh one until
``--auth-token-max-lifetime-s`` (7 days; 0: not past its expiry) after its user logged in
(``controller.rpc.authentication``).

The signing key is a secret shared by the controllers and the segment stores: it is read from a file (its
content, stripped) or the environment, never from the command line (which ``ps`` shows), and never logged.
A controller authenticates callers when it has a password file (then it needs the key); a segment store
checks tokens when it has the key.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from segstore_shared.errors import SegstoreError

PASSWORD_FILE_ENV = "SEGSTORE_AUTH_PASSWORD_FILE"
SIGNING_KEY_ENV = "SEGSTORE_AUTH_TOKEN_SIGNING_KEY"
TOKEN_TTL_ENV = "SEGSTORE_AUTH_TOKEN_TTL_S"
TOKEN_MAX_LIFETIME_ENV = "SEGSTORE_AUTH_TOKEN_MAX_LIFETIME_S"
DEFAULT_TOKEN_TTL_S = 600
DEFAULT_TOKEN_MAX_LIFETIME_S = 7 * 24 * 3600


class AuthSettingsError(SegstoreError):
    """An authentication setting is missing or unusable (the message names it, never a secret)."""


def add_cli_arguments(parser: argparse.ArgumentParser, *, controller: bool) -> None:
    group = parser.add_argument_group("authentication", "callers must authenticate (default: off)")
    if controller:
        group.add_argument(
            "--auth-password-file",
            help=f"users, password hashes and ACLs (segstore auth add-user writes it); turns authentication on "
            f"(${PASSWORD_FILE_ENV})",
        )
        group.add_argument(
            "--auth-token-ttl-s",
            type=int,
            help=f"lifetime of the delegation tokens this controller signs (default {DEFAULT_TOKEN_TTL_S}) "
            f"(${TOKEN_TTL_ENV})",
        )
        group.add_argument(
            "--auth-token-max-lifetime-s",
            type=int,
            help=f"how long after a user logs in the tokens issued to them may be renewed (default "
            f"{DEFAULT_TOKEN_MAX_LIFETIME_S}, 7 days; 0: not past their lifetime) (${TOKEN_MAX_LIFETIME_ENV})",
        )
    group.add_argument(
        "--auth-token-signing-key-file",
        help=f"file holding the key delegation tokens are signed with, shared by controllers and segment stores "
        f"(or ${SIGNING_KEY_ENV} with the key itself)",
    )


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def signing_key(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str | None:
    """The token signing key: the file's content (stripped), else the environment; None if neither is set."""
    path = getattr(args, "auth_token_signing_key_file", None)
    if path:
        try:
            key = Path(path).read_text().strip()
        except OSError as exc:
            raise AuthSettingsError(f"--auth-token-signing-key-file {path}: cannot read it ({exc.strerror})") from None
        if not key:
            raise AuthSettingsError(f"--auth-token-signing-key-file {path}: the file is empty")
        return key
    key = _environ(environ).get(SIGNING_KEY_ENV, "").strip()
    return key or None


def password_file(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Path | None:
    value = getattr(args, "auth_password_file", None) or _environ(environ).get(PASSWORD_FILE_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        raise AuthSettingsError(f"--auth-password-file {path}: is a directory, not a password file")
    if not path.is_file():
        raise AuthSettingsError(f"--auth-password-file {path}: no such file (segstore auth add-user creates it)")
    return path


def token_ttl_s(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    value = _seconds(args, "auth_token_ttl_s", TOKEN_TTL_ENV, DEFAULT_TOKEN_TTL_S, environ)
    if value <= 0:
        raise AuthSettingsError(f"--auth-token-ttl-s: must be positive, not {value}")
    return value


def token_max_lifetime_s(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    value = _seconds(args, "auth_token_max_lifetime_s", TOKEN_MAX_LIFETIME_ENV, DEFAULT_TOKEN_MAX_LIFETIME_S, environ)
    if value < 0:
        raise AuthSettingsError(f"--auth-token-max-lifetime-s: must be 0 or more, not {value}")
    return value


def _seconds(args: argparse.Namespace, name: str, env: str, default: int, environ: Mapping[str, str] | None) -> int:
    value = getattr(args, name, None)
    if value is None:
        text = _environ(environ).get(env, "").strip()
        try:
            value = int(text) if text else default
        except ValueError:
            raise AuthSettingsError(f"{env}: not a number of seconds: {text!r}") from None
    return int(value)
