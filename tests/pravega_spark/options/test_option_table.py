"""docs/spark.md documents every option of ``format("segstore")`` once, in one table, and that table is the parsers'.

Three lists must agree: the option table of docs/spark.md, :data:`pravega_spark.options.names.OPTIONS`, and
the names the parsers actually look up (``Options.looked_up``; a lookup of an unregistered name already fails).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pravega_spark.options import names as option_names
from pravega_spark.options.common import Options
from pravega_spark.options.names import OPTIONS, OptionName
from pravega_spark.options.read import ReadOptions
from pravega_spark.options.write import WriteOptions

pytestmark = pytest.mark.unit

SPARK_PAGE = Path(__file__).resolve().parents[3] / "docs" / "spark.md"
HEADER = "| option | alias | for | meaning |"


def _spark_section() -> str:
    """The Spark page: every option table and the migration table are on it."""
    return SPARK_PAGE.read_text()


def _table(section: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table that starts with ``header``, as lists of cells."""
    lines = section[section.index(header) :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip()[1:-1].split("|")])
    return rows


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def documented_options() -> list[OptionName]:
    options = []
    for cells in _table(_spark_section(), HEADER):
        assert len(cells) == 4, cells
        name, aliases, kinds, meaning = cells
        (option,) = _names(name)
        used_by = {k.strip() for k in kinds.split(",")}
        assert used_by <= {"reads", "writes"} and used_by, cells
        assert meaning, f"{option}: no meaning"
        spark = meaning.startswith("Spark's own")
        options.append(OptionName(option, tuple(_names(aliases)), "reads" in used_by, "writes" in used_by, spark))
    return options


def test_the_docs_have_one_option_table_and_it_is_the_registry() -> None:
    section = _spark_section()
    assert section.count("| option |") == 1
    documented = documented_options()
    assert [o.name for o in documented] == [o.name for o in OPTIONS]  # same options, same order
    assert documented == list(OPTIONS)  # same aliases, same reads/writes, same "Spark's own"


def test_every_option_is_documented_once() -> None:
    names = [n.lower() for o in documented_options() for n in o.names]
    assert len(names) == len(set(names))


def _looked_up(parse: object, options: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    views: list[Options] = []
    real = Options.of

    def spy(values: dict[str, str], kind: option_names.Kind | None = None) -> Options:
        view = real(values, kind)
        views.append(view)
        return view

    monkeypatch.setattr(Options, "of", staticmethod(spy))
    parse(options)  # type: ignore[operator]
    (view,) = views
    return view.looked_up


def _registered(kind: option_names.Kind) -> Iterator[str]:
    return (n.lower() for n in option_names.known_names(kind))


@pytest.mark.parametrize(
    ("kind", "parse"), [("read", ReadOptions.parse), ("write", WriteOptions.parse)], ids=["reads", "writes"]
)
def test_the_parsers_look_up_exactly_the_registered_options(
    kind: option_names.Kind, parse: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up = _looked_up(parse, {"scope": "s", "stream": "x"}, monkeypatch)
    assert looked_up == set(_registered(kind))


# The options in the Pravega Spark connector's documentation (documentation/src/docs/configuration.md of
# pravega/spark-connectors, as of its Spark 3.5 release), written down here: the migration table must cover them.
PRAVEGA_CONNECTOR_OPTIONS = {
    "allow_create_scope",
    "allow_create_stream",
    "controller",
    "default_num_segments",
    "default_retention_duration_milliseconds",
    "default_retention_size_bytes",
    "default_scale_factor",
    "default_segment_target_rate_bytes_per_sec",
    "default_segment_target_rate_events_per_sec",
    "end_stream_cut",
    "exactly_once",
    "metadata",
    "read_after_write_consistency",
    "scope",
    "start_stream_cut",
    "stream",
    "transaction_timeout_ms",
    "transaction_status_poll_interval_ms",
}
PRAVEGA_UNDOCUMENTED = {"approx_bytes_per_trigger", "encoding"}
"""Taken by the connector's code without being in its table (``encoding`` by releases before 2020)."""


def test_the_migration_table_maps_every_pravega_connector_option_to_its_option_here() -> None:
    rows = _table(_spark_section(), "| Pravega connector | here | what differs |")
    pravega = [_names(cells[0])[0] for cells in rows]
    assert len(pravega) == len(set(pravega))
    assert set(pravega) == PRAVEGA_CONNECTOR_OPTIONS | PRAVEGA_UNDOCUMENTED
    for cells in rows:
        (theirs,) = _names(cells[0])
        if theirs in option_names.REFUSED:
            assert cells[1] == "refused"
            continue
        (ours,) = _names(cells[1])
        option = next(o for o in OPTIONS if o.name == ours)
        assert theirs in option.names, f"{theirs} is not a name of {ours}"


def test_every_option_of_the_pravega_connector_is_taken_by_reads_or_writes_or_refused() -> None:
    for name in PRAVEGA_CONNECTOR_OPTIONS | PRAVEGA_UNDOCUMENTED:
        assert option_names.is_registered(name, None) or name in option_names.REFUSED, name
