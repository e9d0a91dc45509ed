"""Deleting a table directory's unreferenced files through the table's FileIO (:mod:`segment_store.iceberg.cleanup`):
pyiceberg's own PyArrow and fsspec FileIOs on local directories, and a FileIO that cannot list. No network (the
same code on S3: tests/segment_store/iceberg/test_iceberg_s3_warehouse.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from segment_store.iceberg.cleanup import delete_unreferenced_files, list_file_names

pytestmark = pytest.mark.unit


def write(io: FileIO, url: str) -> None:
    with io.new_output(url).create(overwrite=True) as out:
        out.write(b"x")


def never() -> set[str]:
    raise AssertionError("referenced() called without a candidate file")


@pytest.mark.parametrize("io", [PyArrowFileIO(), FsspecFileIO({})], ids=["pyarrow", "fsspec"])
@pytest.mark.parametrize("as_url", [True, False], ids=["file-url", "path"])
def test_delete_with_unreferenced_files_deletes_only_those(io: FileIO, as_url: bool, tmp_path: Path) -> None:
    directory = tmp_path / "metadata"
    url = directory.as_uri() if as_url else str(directory)
    for name in ("a.avro", "b.avro", "c.json", "sub/d.avro"):
        write(io, f"{url}/{name}")
    assert sorted(list_file_names(io, url) or ()) == ["a.avro", "b.avro", "c.json"]  # files only, not recursive
    assert delete_unreferenced_files(io, url, ".avro", lambda: {"b.avro"}) == 1
    assert sorted(p.name for p in directory.iterdir()) == ["b.avro", "c.json", "sub"]
    assert (directory / "sub" / "d.avro").exists()
    assert delete_unreferenced_files(io, url, ".avro", lambda: {"b.avro"}) == 0


@pytest.mark.parametrize("io", [PyArrowFileIO(), FsspecFileIO({})], ids=["pyarrow", "fsspec"])
def test_delete_with_no_candidate_never_asks_what_is_referenced(io: FileIO, tmp_path: Path) -> None:
    assert list_file_names(io, (tmp_path / "missing").as_uri()) == []
    assert delete_unreferenced_files(io, (tmp_path / "missing").as_uri(), ".avro", never) == 0
    write(io, f"{tmp_path.as_uri()}/data/only.parquet")
    assert delete_unreferenced_files(io, f"{tmp_path.as_uri()}/data", ".avro", never) == 0


def test_delete_with_percent_encoded_table_location_finds_the_files_where_the_file_io_wrote_them(
    tmp_path: Path,
) -> None:
    """A table location is a URL (the default catalog's warehouse is ``Path.as_uri()``: a space is ``%20``) and
    pyiceberg's PyArrowFileIO writes under the path as spelt, undecoded: the files are listed there too."""
    io = PyArrowFileIO()
    url = (tmp_path / "data dir" / "metadata").as_uri()
    assert "%20" in url
    write(io, f"{url}/old.avro")
    assert delete_unreferenced_files(io, url, ".avro", set) == 1
    assert list_file_names(io, url) == []


class _NoListing(FileIO):
    """A FileIO with no filesystem to list (a custom ``py-io-impl``)."""

    def new_input(self, location: str) -> InputFile:
        raise AssertionError("not used")

    def new_output(self, location: str) -> OutputFile:
        raise AssertionError("not used")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise AssertionError("nothing may be deleted")


def test_delete_with_file_io_that_cannot_list_deletes_nothing_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    io: Any = _NoListing()
    with caplog.at_level(logging.INFO, logger="segment_store.iceberg.cleanup"):
        for _ in range(3):
            assert delete_unreferenced_files(io, tmp_path.as_uri(), ".avro", never) == 0
    said = [r for r in caplog.records if "cannot list" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO and "_NoListing" in said[0].getMessage()
