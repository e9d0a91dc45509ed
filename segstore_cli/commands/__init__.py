"""The ``segstore`` subcommands, one module each: ``zookeeper``, ``nats``, ``segmentstore``, ``controller``,
``standalone``, ``auth``, ``admin``, ``selftest``, ``demo``.

Each module has ``add_parser(subparsers)``, which adds its subcommand (flags, help, and the function that runs it
as ``func``), and that run function, ``run(args) -> exit code``. :mod:`segstore_cli.main` adds them in order and
dispatches. A command module imports :mod:`segstore_cli.arguments` (the flags several share) and what it runs
(the engine, the controller, or the tools under ``segstore_cli``: ``standalone``, ``demo``, ``admin``,
``selftest``), never another command module; what it runs is imported when it runs, so ``segstore --help`` stays
fast.
"""
