"""The ``segstore admin`` argument parser and dispatch (added to the command line by ``segstore_cli.commands.admin``).

``segstore admin OBJECT ACTION [ARGS] [OPTIONS]``: each action names its command as ``module:function`` (imported
when it runs, so ``segstore --help`` stays fast). The dispatch reads the connection options, opens a session,
runs the command, prints its view as tables or ``--json`` on standard output, and turns an error into one line on
standard error, ``segstore admin: <what was wrong>``, and the exit code it means (:mod:`.errors`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
import time
from typing import Any, NoReturn

from segstore_cli.admin import parsing
from segstore_cli.admin.errors import EXIT_CODES_HELP, EXIT_OK, EXIT_USAGE

PROG_ERROR = "segstore admin"

_EXAMPLES = """examples:
  segstore admin scope create shop
  segstore admin stream create shop/orders --segments 4 --retention-time 7d
  segstore admin stream describe shop/orders
  segstore admin stream scale shop/orders --to 8
  segstore admin reader-group list shop
  segstore admin reader-group delete shop/billing
  segstore admin --controller tls://ctl.example:9090 --trust-store ca.pem --username admin scope list
"""


class AdminParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit code 2); flags are spelled out whole."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        from segstore_cli.admin.errors import plain

        self.exit(EXIT_USAGE, f"{self.prog}: {plain(message)} (see {self.prog} --help)\n")


def _timestamp(text: str) -> int:
    return parsing.timestamp_ms(text, int(time.time() * 1000))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _command(
    verbs: argparse._SubParsersAction[AdminParser], name: str, target: str, help_text: str, **kwargs: Any
) -> AdminParser:
    """A leaf command ``name`` running ``target`` (``module:function`` under ``segstore_cli.admin``)."""
    from segstore_cli.admin.connection import add_connection_arguments

    parser = verbs.add_parser(
        name,
        help=help_text,
        description=kwargs.pop("description", help_text),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    add_connection_arguments(parser, suppress=True)
    parser.set_defaults(func=run, admin_command=target)
    return parser


def _noun(
    nouns: argparse._SubParsersAction[AdminParser], name: str, help_text: str, description: str
) -> argparse._SubParsersAction[AdminParser]:
    """An object (``scope``, ``stream``, ...) whose actions are added to what this returns."""
    parser = nouns.add_parser(
        name,
        help=help_text,
        description=description,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.add_subparsers(dest="admin_action", metavar="ACTION", required=True)


def _scope_commands(nouns: argparse._SubParsersAction[AdminParser]) -> None:
    verbs = _noun(
        nouns,
        "scope",
        "list, create and delete scopes",
        "Scopes hold streams, reader groups and key-value tables. List them, create one, delete an empty one\n"
        "(when it is not empty, the refusal names what it still holds and how to delete that).",
    )
    _command(verbs, "list", "streams:list_scopes", "list the scopes")
    create = _command(verbs, "create", "streams:create_scope", "create a scope (nothing changes if it exists)")
    create.add_argument("scope", type=parsing.scope_name, help="the scope")
    delete = _command(
        verbs,
        "delete",
        "streams:delete_scope",
        "delete an empty scope",
        description="Delete a scope that holds no streams, reader groups or key-value tables; otherwise say which\n"
        "it holds (exit code 1).",
    )
    delete.add_argument("scope", type=parsing.scope_name, help="the scope")


_STREAM_HELP = "the stream, as SCOPE/STREAM"


def _stream_commands(nouns: argparse._SubParsersAction[AdminParser]) -> None:
    actions = _noun(
        nouns,
        "stream",
        "list, create, describe, scale, seal, truncate, delete streams",
        "The streams of a scope: list and create them; describe one (configuration, segments and their state,\n"
        "head and tail cuts, size, subscribers, scale history); scale, seal, truncate or delete it.",
    )
    listing = _command(actions, "list", "streams:list_streams", "list the streams of a scope")
    listing.add_argument("scope", type=parsing.scope_name, help="the scope")
    listing.add_argument("--tag", help="only the streams with this tag")
    _stream_create(actions)
    describe = _command(
        actions,
        "describe",
        "describe:describe_stream",
        "configuration, segments and key ranges, head and tail cuts, size, subscribers, scale history",
    )
    describe.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)
    describe.add_argument(
        "--history",
        type=int,
        default=10,
        metavar="N",
        help="show the last N epochs of the scale history (0: all; default 10)",
    )
    _stream_scale(actions)
    seal = _command(actions, "seal", "streams:seal_stream", "seal a stream: no more writes")
    seal.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)
    _stream_truncate(actions)
    delete = _command(actions, "delete", "streams:delete_stream", "delete a sealed stream and its data")
    delete.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)
    delete.add_argument("--seal", action="store_true", help="seal it first if it is not sealed")


def _stream_create(actions: argparse._SubParsersAction[AdminParser]) -> None:
    create = _command(actions, "create", "streams:create_stream", "create a stream (an existing one is left as is)")
    create.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)
    create.add_argument("--segments", type=_positive, default=1, help="segments, the minimum with a rate (default 1)")
    create.add_argument("--events-per-second", type=_positive, help="scale by rate: target events/s per segment")
    create.add_argument("--kbytes-per-second", type=_positive, help="scale by rate: target KiB/s per segment")
    create.add_argument("--scale-factor", type=_positive, default=2, help="with a rate: split into (default 2)")
    create.add_argument(
        "--retention-time",
        type=parsing.duration_ms,
        metavar="DURATION",
        help="keep at least this long (7d, 12h, ...); older data is truncated",
    )
    create.add_argument(
        "--retention-size",
        type=parsing.size_bytes,
        metavar="SIZE",
        help="keep at least this much (10GiB, 500MB, ...); more is truncated",
    )
    create.add_argument("--tag", action="append", help="a tag (repeat for more)")


def _stream_scale(actions: argparse._SubParsersAction[AdminParser]) -> None:
    scale = _command(
        actions,
        "scale",
        "streams:scale_stream",
        "replace segments by new ones (and wait for it)",
        description="Scale a stream: --to N replaces every active segment by N over even key ranges;\n"
        "--seal and --ranges replace some segments by others over the same keys. Waits until the\n"
        "controller has done it, with a spinner on a terminal.",
    )
    scale.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)
    how = scale.add_mutually_exclusive_group(required=True)
    how.add_argument("--to", type=_positive, metavar="N", help="N segments over even key ranges")
    how.add_argument(
        "--seal",
        type=parsing.segment_refs,
        metavar="SEGMENTS",
        help="active segments to replace, e.g. 0,1 (with --ranges)",
    )
    scale.add_argument("--ranges", type=parsing.key_ranges, help="their key ranges' new split, e.g. 0-0.25,0.25-0.5")
    scale.add_argument("--no-wait", action="store_true", help="return once the controller started the scale")
    scale.add_argument("--wait-timeout", type=float, default=300.0, metavar="S", help="give up waiting (default 300)")


def _stream_truncate(actions: argparse._SubParsersAction[AdminParser]) -> None:
    truncate = _command(actions, "truncate", "streams:truncate_stream", "drop a stream's data before a cut")
    truncate.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)
    where = truncate.add_mutually_exclusive_group(required=True)
    where.add_argument("--tail", action="store_true", help="drop everything written so far")
    where.add_argument(
        "--time",
        type=_timestamp,
        metavar="TIME",
        help="drop events ingested before TIME: ISO 8601 (UTC unless it says), ms since 1970, or '1h ago'",
    )
    where.add_argument(
        "--cut",
        type=parsing.stream_cut,
        metavar="CUT",
        help="drop what is before this cut: SEGMENT=OFFSET,... as stream describe shows",
    )


def _other_commands(nouns: argparse._SubParsersAction[AdminParser]) -> None:
    actions = _noun(
        nouns,
        "reader-group",
        "reader groups: list, describe, delete",
        "The reader groups the controller knows: list those of a scope (subscribed to its streams or not), describe\n"
        "one (configuration, streams, readers' positions and lag), delete one (its state and controller record).",
    )
    listing = _command(
        actions, "list", "groups:list_groups", "every reader group of a scope, with its retention and streams"
    )
    listing.add_argument("scope", type=parsing.scope_name, help="the scope")
    describe = _command(actions, "describe", "groups:describe_group", "a reader group's configuration and streams")
    describe.add_argument("group", type=parsing.scoped_name, help="the reader group, as SCOPE/GROUP")
    delete = _command(
        actions,
        "delete",
        "groups:delete_group",
        "delete a reader group: its state and its controller record",
        description="Delete a reader group: its state (readers go offline), its controller record and its\n"
        "subscriptions (retention no longer waits for it), and a Java client's _RG<GROUP> state stream.",
    )
    delete.add_argument("group", type=parsing.scoped_name, help="the reader group, as SCOPE/GROUP")

    actions = _noun(
        nouns,
        "segment",
        "one segment by its name",
        "One segment by its qualified name, SCOPE/STREAM/NUMBER[.#epoch.EPOCH]: where its data starts and ends,\n"
        "its state (active or sealed, as stream describe says), its key range and its segment store.",
    )
    info = _command(actions, "info", "segments:segment_info", "a segment's start, length, state and segment store")
    info.add_argument("segment", type=parsing.qualified_segment, help="SCOPE/STREAM/NUMBER[.#epoch.EPOCH]")

    _command(nouns, "controllers", "segments:list_controllers", "the controllers of the cluster")
    _command(nouns, "containers", "cluster:list_containers", "which segment store runs which segment container")
    _command(nouns, "pins", "pins:list_pins", "readers' live pins on Tier-2 chunk files, per container")
    _command(nouns, "tables", "tables:list_tables", "each stream's Iceberg table: snapshot, files, lag, errors")
    txns = _command(nouns, "transactions", "cluster:list_transactions", "a stream's open transactions")
    txns.add_argument("stream", type=parsing.scoped_name, help=_STREAM_HELP)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``admin`` and its commands to the ``segstore`` command line."""
    from segstore_cli.admin.connection import add_connection_arguments

    parser_class = sub._parser_class
    sub._parser_class = AdminParser  # its usage errors too are one line in the admin's words
    try:
        admin = sub.add_parser(
            "admin",
            help="inspect and change scopes, streams, reader groups and segments through a controller",
            description="Administer a running system through its controller (Controller.proto) and segment stores:\n"
            "tables on a terminal, --json for scripts. The controller and security options go before or after\n"
            "the command.",
            epilog=f"{_EXAMPLES}\n{EXIT_CODES_HELP}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    finally:
        sub._parser_class = parser_class
    add_connection_arguments(admin, suppress=False)
    nouns = admin.add_subparsers(dest="admin_object", metavar="OBJECT", required=True, parser_class=AdminParser)
    _scope_commands(nouns)
    _stream_commands(nouns)
    _other_commands(nouns)


def _fail(message: str, code: int) -> int:
    print(f"{PROG_ERROR}: {message}", file=sys.stderr)
    return code


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What argparse cannot check: ``stream scale`` takes ``--ranges`` with ``--seal`` and only then."""
    if args.admin_command == "streams:scale_stream" and (args.seal is None) != (args.ranges is None):
        return "stream scale: --seal and --ranges go together (the segments to replace and their keys' new split)"
    return None


def run(args: argparse.Namespace) -> int:
    """Run the command ``args`` name; print its view; map its error to one stderr line and an exit code."""
    from rich.console import Console

    from controller_client.model import InvalidModelError
    from segstore_cli.admin.connection import Connection, open_session
    from segstore_cli.admin.errors import exit_code_for, message_for
    from segstore_cli.admin.progress import Activity
    from segstore_shared.errors import SegstoreError

    problem = _usage_problem(args)
    if problem is not None:
        return _fail(problem, EXIT_USAGE)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # gRPC's own INFO lines (a TLS handshake) are not ours to print
    module_name, function_name = args.admin_command.split(":")
    command = getattr(importlib.import_module(f"segstore_cli.admin.{module_name}"), function_name)
    activity = Activity(Console(stderr=True))

    async def execute() -> object:
        connection = Connection.from_args(args, os.environ, sys.stdin)
        async with open_session(connection) as session:
            return await command(session, args, activity)

    try:
        view = asyncio.run(execute())
    except (SegstoreError, InvalidModelError) as error:
        return _fail(message_for(error), exit_code_for(error))
    try:
        _print(view, args.json)
    except BrokenPipeError:  # the reader went away (| head): the rest is not wanted, the operation was done
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so Python's flush at exit does not fail again
    return EXIT_OK


def _print(view: object, as_json: bool) -> None:
    """The view on standard output: JSON, tables in colour on a terminal, plain aligned text otherwise."""
    from rich.console import Console

    from segstore_cli.admin import render

    if as_json:
        print(render.dumps(view), flush=True)
    elif sys.stdout.isatty():
        console = Console()
        for renderable in render.to_human(view):
            console.print(renderable)
    else:
        print(render.to_text(view), flush=True)
