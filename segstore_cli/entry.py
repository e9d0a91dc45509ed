"""The ``segstore`` command's entry point (``python -m segstore_cli`` and the installed script): the settings that
must precede every import, then the dispatch (:mod:`segstore_cli.main`).

pyarrow chooses its allocator once, when it loads, and the commands' modules load it: so the allocator is chosen
here, before them (:func:`~segstore_shared.memory_release.arrow_on_system_allocator`).
"""

from __future__ import annotations

from segstore_shared.memory_release import arrow_on_system_allocator


def main() -> int:
    arrow_on_system_allocator()
    from segstore_cli.main import main as dispatch  # after the allocator is chosen

    return dispatch()
