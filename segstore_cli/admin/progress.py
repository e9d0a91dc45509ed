"""Progress of long operations (a scale, sealing and deleting a stream): a spinner with the elapsed time.

Shown on standard error, and only on a terminal: piped or captured output (scripts, ``--json``, tests) gets
none of it. The controller does not report how far a scale or a delete has come, only whether it is done, so
the display says what is being waited for and for how long, never a percentage it would have to invent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

Update = Callable[[str], None]
"""Change the description of the step in progress."""


class Activity:
    """Steps of a long operation, each shown while it runs (on a terminal) and gone when it ends."""

    def __init__(self, console: Console | None) -> None:
        """``console``: where to show the steps (standard error); None shows nothing."""
        self._console = console if console is not None and console.is_terminal else None

    @contextmanager
    def step(self, description: str) -> Iterator[Update]:
        """Show ``description`` with a spinner and the time elapsed until the block ends."""
        if self._console is None:
            yield lambda _text: None
            return
        columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=self._console, transient=True) as progress:
            task = progress.add_task(description, total=None)
            yield lambda text: progress.update(task, description=text)


def silent() -> Activity:
    """An activity that shows nothing."""
    return Activity(None)
