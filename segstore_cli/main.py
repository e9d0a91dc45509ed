"""The ``segstore`` command line: the top parser, built from the subcommands, and the dispatch.

Each subcommand is a module of :mod:`segstore_cli.commands` (its flags and the function that runs it); this
module adds them in the order ``segstore --help`` lists them, then runs the one named.
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
from collections.abc import Callable, Sequence

from segment_store import __version__
from segstore_cli.commands import (
    admin,
    auth,
    controller,
    demo,
    nats,
    segmentstore,
    selftest,
    standalone,
    zookeeper,
)

COMMANDS = (zookeeper, nats, segmentstore, standalone, controller, auth, admin, selftest, demo)
"""The subcommands, in the order of ``segstore --help``."""


def build_parser() -> argparse.ArgumentParser:
    """The ``segstore`` parser with every subcommand; each sets ``func``, the function that runs it."""
    parser = argparse.ArgumentParser(
        prog="segstore",
        description="segstore: a streaming storage system speaking the Pravega protocols, with a Spark connector.",
    )
    parser.add_argument("--version", action="version", version=f"segstore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


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
    # a crash in C code (SIGSEGV, SIGABRT, ...) leaves every thread's Python stack on stderr (the process log)
    faulthandler.enable()
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
