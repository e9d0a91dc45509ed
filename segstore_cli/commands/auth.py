"""``segstore auth``: manage and check a password file of the controller (``auth add-user``, ``auth check``)."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from segstore_cli.arguments import Subparsers
from segstore_cli.private_files import write_private
from segstore_shared.auth.passwords import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    PRAVEGA_ITERATIONS,
    PasswordFile,
    PasswordFileError,
)


def add_parser(sub: Subparsers) -> None:
    """Add ``auth add-user`` and ``auth check`` to the ``segstore`` command line."""
    auth = sub.add_parser(
        "auth",
        help="manage the password file of the controller (Pravega's format)",
        description="Users, password hashes and ACLs in Pravega's password file format (user:hash:acl lines).",
    )
    commands = auth.add_subparsers(dest="auth_command", metavar="AUTH_COMMAND", required=True)

    add = commands.add_parser(
        "add-user",
        help="add a user, or replace one, in a password file",
        description="Hash the password (PBKDF2-HMAC-SHA256, Pravega's encoding) and write the user's line; the "
        "file is created if missing and replaced atomically, with mode 0600. The password is read from the "
        "terminal (twice) or, with --password-stdin, from the first line of standard input.",
    )
    add.add_argument("--password-file", required=True, help="the password file to create or update")
    add.add_argument("--user", required=True, help="the user name (no ':')")
    add.add_argument(
        "--acl",
        default="",
        help="the user's ACL, e.g. 'prn::*,READ_UPDATE' or 'prn::/scope:s,READ;prn::/scope:s/*,READ_UPDATE' "
        "(default: empty: the user can log in but is granted nothing)",
    )
    add.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations of the new hash (default {DEFAULT_ITERATIONS:,}, OWASP's figure; Pravega's own "
        f"tool writes {PRAVEGA_ITERATIONS:,}). Stored in the entry: entries of other counts still verify",
    )
    add.set_defaults(func=run_add_user)

    check = commands.add_parser(
        "check",
        help="read a password file and show its users, their ACLs and any problems",
        description="Parse the file as the controller does; print each user and ACL (never a hash) and the "
        "warnings (malformed ACL entries, unusable hashes, lines Pravega would ignore). Exit 1 if it cannot be used.",
    )
    check.add_argument("--password-file", required=True, help="the password file to check")
    check.set_defaults(func=run_check)


def _read_password(from_stdin: bool) -> str | None:
    """The new password, or None (after saying why on stderr)."""
    if from_stdin:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            print("segstore auth add-user: the passwords differ", file=sys.stderr)
            return None
    if not password:
        print("segstore auth add-user: the password is empty", file=sys.stderr)
        return None
    return password


def run_add_user(args: argparse.Namespace) -> int:
    """``auth add-user``: add or replace a user; exit 1 if the file cannot be read or written, 2 on bad input."""
    path = Path(args.password_file)
    if not PRAVEGA_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        print(f"segstore auth add-user: --iterations must be between {PRAVEGA_ITERATIONS:,} (Pravega's) and "
              f"{MAX_ITERATIONS:,}, not {args.iterations:,}", file=sys.stderr)  # fmt: skip
        return 2
    try:
        current = PasswordFile.load(path) if path.exists() else PasswordFile(source=str(path))
    except PasswordFileError as exc:
        print(f"segstore auth add-user: {exc}", file=sys.stderr)
        return 1
    if current.stopped_at_line is not None:
        print(f"segstore auth add-user: {path} line {current.stopped_at_line} is empty and lines follow it; Pravega "
              "ignores them and a rewrite would drop them: remove the empty line or those lines first",
              file=sys.stderr)  # fmt: skip
        return 1
    password = _read_password(args.password_stdin)
    if password is None:
        return 2
    try:
        updated = current.with_user(args.user, password, args.acl, iterations=args.iterations)
    except ValueError as exc:
        print(f"segstore auth add-user: {exc}", file=sys.stderr)
        return 2
    for warning in updated.warnings:
        print(f"segstore auth add-user: warning: {warning}", file=sys.stderr)
    if args.iterations < DEFAULT_ITERATIONS:
        print(f"segstore auth add-user: warning: {args.iterations:,} iterations, fewer than {DEFAULT_ITERATIONS:,}: "
              "a stolen password file is that much cheaper to crack", file=sys.stderr)  # fmt: skip
    try:
        write_private(path, updated.dump())
    except OSError as exc:
        print(f"segstore auth add-user: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    verb = "replaced" if args.user in current.users else "added"
    print(f"{verb} user {args.user} in {path}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    """``auth check``: the users and ACLs of a password file and its warnings; exit 1 if it cannot be used."""
    try:
        passwords = PasswordFile.load(args.password_file)
    except PasswordFileError as exc:
        print(f"segstore auth check: {exc}", file=sys.stderr)
        return 1
    users = passwords.users
    print(f"{args.password_file}: {len(users)} user(s)")
    for name, entry in users.items():
        print(f"  {name}: {entry.acl if entry.acl.entries else '(no permissions)'}")
    if passwords.warnings:
        print("warnings:")
        for warning in passwords.warnings:
            print(f"  {warning}")
    return 0
