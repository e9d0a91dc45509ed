"""The reference parts of docs/ list what the code has: every ``segstore`` subcommand, every ``segstore admin``
command, and (in the metrics tables) every metric family the processes export, no more and no fewer."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from exported_metrics import exported_series

from segstore_cli.main import build_parser

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _first_cells(text: str, header: str) -> list[str]:
    """The first cells of every Markdown table of ``text`` that starts with ``header``."""
    cells = []
    for start in [m.start() for m in re.finditer(re.escape(header), text)]:
        for line in text[start:].splitlines()[2:]:
            if not line.startswith("|"):
                break
            cells.append(line.split(" | ")[0].lstrip("| "))
    return cells


def test_the_command_line_lists_every_segstore_subcommand() -> None:
    text = (DOCS / "running.md").read_text()
    block = text[text.index("## The command line") :]
    block = block[block.index("```bash") : block.index("```\n", block.index("```bash") + 7)]
    for name in _subcommands(build_parser()):
        assert re.search(rf"segstore {re.escape(name)}\b", block), f"docs/running.md: segstore {name} is missing"


def test_the_admin_table_lists_every_admin_command() -> None:
    documented = " ".join(_first_cells((DOCS / "operations.md").read_text(), "| command | what it does |"))
    commands = _subcommands(_subcommands(build_parser())["admin"])
    for noun, parser in commands.items():
        for verb in _subcommands(parser) or [""]:
            command = f"{noun} {verb}".strip()
            assert f"`{command}" in documented, f"docs/operations.md: the admin table lacks `{command}`"


def test_the_metrics_tables_list_every_exported_family() -> None:
    text = (DOCS / "operations.md").read_text()
    section = text[text.index("## Metrics and health") : text.index("\n## ", text.index("## Metrics and health") + 1)]
    documented = {
        name for cell in _first_cells(section, "| family | type |") for name in re.findall(r"`(segstore_\w+)", cell)
    }
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exported_series()}
    assert {re.sub(r"_total$", "", name) for name in documented} == families
