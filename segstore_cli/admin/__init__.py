"""``segstore admin``: scopes, streams, reader groups and segments of a running system, from a terminal.

The admin command line is a client of the controller (``Controller.proto``) and, for lengths and offsets, of
the segment stores, built on :mod:`controller_client` (``StreamManager`` and ``ControllerClient``). It reads and
changes only what those expose; it keeps no state of its own.

Modules, each one concern:

* ``cli`` - the ``admin`` argument parser (added by ``segstore_cli.commands.admin``) and the dispatch: run a command,
  render its result, turn its error into one line on stderr and an exit code;
* ``connection`` - the controller URI and security options (TLS trust, user and password) and the session;
* ``parsing`` - pure parsers of what users type (``scope/stream``, segment names, durations, sizes, times, key
  ranges, stream cuts) and the labels shown for segments;
* ``views`` - what each command found, as plain frozen dataclasses (what is rendered, as a table or as JSON);
* ``streams`` (scopes and streams), ``describe`` (a stream in detail), ``groups`` (reader groups), ``segments``
  (one segment, the controllers), ``cluster`` (containers, open transactions) - the commands;
* ``extension`` - calls of segstore's admin extension of the controller (what ``Controller.proto`` cannot answer:
  everything a scope holds, the container assignment, open transactions);
* ``render`` - views as ``rich`` tables or JSON; ``progress`` - a spinner for long operations on a terminal;
* ``errors`` - exit codes and the mapping of errors to them, and to one line in the admin's words.

One vocabulary everywhere: a segment (and a stream) is ``active`` or ``sealed``, as Pravega says; names appear
without quotes (``stream shop/orders does not exist``); settings are named by the flags users type
(``--client-key``, not ``client_key``).
"""
