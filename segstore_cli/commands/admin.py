"""``segstore admin``: scopes, streams, reader groups and segments of a running system.

Its parser and dispatch live with the rest of the admin tool, in :mod:`segstore_cli.admin.cli` (every admin command
runs :func:`run` there); this module adds them to the ``segstore`` command line like every other command.
"""

from __future__ import annotations

from segstore_cli.admin.cli import add_commands, run
from segstore_cli.arguments import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``admin`` and its commands to the ``segstore`` command line."""
    add_commands(sub)
