"""The ``segstore`` command line: the top parser, built from the subcommands, and the dispatch.

Each subcommand is a module of :mod:`segstore_cli.commands` (its flags and the function that runs it); this
module adds them in the order ``segstore --help`` lists them, then runs the one named.

An expected failure ends in one line on stderr, ``segstore <command>: <what>``, and an exit code, never a
traceback: a bad flag (a usage error: exit 2), and what the dispatch maps (:func:`run_command`): an error segstore
raises on purpose (:class:`~segstore_shared.errors.SegstoreError`: a missing executable, a server that cannot be
reached or refuses us) and a file that is missing, unreadable or in the way (exit 1), Ctrl-C (exit 130). Anything
else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import difflib
import faulthandler
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from segment_store import __version__
from segstore_cli.arguments import FILE_ONLY
from segstore_cli.commands import (
    admin,
    auth,
    controller,
    demo,
    dev_secrets,
    nats,
    segmentstore,
    selftest,
    standalone,
    zookeeper,
)
from segstore_shared.errors import SegstoreError

COMMANDS = (zookeeper, nats, segmentstore, standalone, controller, auth, dev_secrets, admin, selftest, demo)
"""The subcommands, in the order of ``segstore --help``."""

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT) before a command took it over: 128 + 2, as a shell reports it."""

OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
"""The OS errors that are the user's environment, not a bug: a path that is missing, unreadable or in the way."""

log = logging.getLogger(__name__)


class SegstoreParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, naming the flag (exit code 2). A flag is
    spelled out whole: a prefix (``--iceberg-table`` for ``--iceberg-tables``) is refused, not guessed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    commands: dict[str, argparse.ArgumentParser] | None = None
    """The subcommands' parsers by name (set on the top parser)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but a flag the subcommand does not know is named by the subcommand ("segstore standalone:
        unrecognized arguments: --prot 0 (did you mean --port?)", its help), not by the top parser."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = (self.commands or {}).get(getattr(parsed, "command", None) or "", self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}{_did_you_mean(parser, extras)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    """The ``segstore`` parser with every subcommand; each sets ``func``, the function that runs it."""
    parser = SegstoreParser(
        prog="segstore",
        description="segstore: a streaming storage system speaking the Pravega protocols, with a Spark connector.",
    )
    parser.add_argument("--version", action="version", version=f"segstore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    parser.commands = dict(sub.choices)
    return parser


def _did_you_mean(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """`` (did you mean --data-dir?)`` for the first unknown flag close to one ``parser`` knows; else nothing."""
    known = [option for action in parser._actions for option in action.option_strings]
    for extra in extras:
        flag = extra.split("=", 1)[0]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75) if flag.startswith("--") else []
        if close:
            return f" (did you mean {close[0]}?)"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand ``argv`` names (the help without one); its exit code."""
    from segstore_shared.processes import honour_parent_death

    honour_parent_death()
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    # gRPC core (C) logs through absl to stderr, a failed TLS handshake at INFO (a plain-text client reaching a TLS
    # port: an expected event, not ours to print); its errors still show. Read when gRPC starts: set before any
    # command imports grpc. GRPC_VERBOSITY=INFO (or DEBUG) in the environment shows them all again.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    # a crash in C code (SIGSEGV, SIGABRT, ...) leaves every thread's Python stack on stderr (the process log)
    faulthandler.enable()
    return run_command(args.command, func, args)


def run_command(command: str, func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``func(args)``; an expected failure (module docstring) becomes one line ``segstore <command>: <what>`` on
    stderr and its exit code (its traceback goes to the log file, if the command has one)."""
    try:
        return func(args)
    except SegstoreError as error:
        return _failed(command, error, str(error) or type(error).__name__)
    except OS_ERRORS as error:
        what = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
        return _failed(command, error, what)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _failed(command: str, error: BaseException, what: str) -> int:
    if logging.getLogger().handlers:  # a command with a log: the traceback there, for whoever looks into it
        log.error("segstore %s: %s", command, what, exc_info=error, extra={FILE_ONLY: True})
    print(f"segstore {command}: {what}", file=sys.stderr, flush=True)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
