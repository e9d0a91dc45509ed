"""segstore's tools: the ``segstore`` command line (``python -m segstore_cli``) and what its subcommands run.

The top of the layers: it may import every other segstore package (``segstore_shared``, the engine
``segment_store``, ``controller``, ``controller_client``, ``pravega_spark``), and none of them imports it (the
import-linter contracts in ``pyproject.toml`` check that).

Inside, from the top (contracts ``cli-layers`` and ``cli-commands``):

* ``entry`` - the entry point (``__main__`` and the installed script run it): process-wide settings that must
  precede every import, then ``main``;
* ``main`` - the top parser, built from the subcommands, and the dispatch;
* ``commands`` - one module per subcommand (its flags and its run function), independent of each other;
* ``arguments`` - the flags several subcommands share and the reading of them;
  ``standalone`` - the supervisor of ``segstore standalone``; ``demo`` - the job of ``segstore demo``;
  ``admin`` - ``segstore admin``; ``selftest`` - ``segstore selftest``.
"""
