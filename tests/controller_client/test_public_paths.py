"""The import paths users write: ``controller_client.blocking`` (a module before 0.2.0, a package since) and the
package root name the same classes."""

from __future__ import annotations

import importlib

import pytest

import controller_client.blocking as blocking
from controller_client.blocking import kvt, reader_groups, streams

pytestmark = pytest.mark.unit


def test_the_blocking_package_names_every_blocking_class() -> None:
    for module in (streams, reader_groups, kvt):
        for name, value in vars(module).items():
            if name.startswith("Blocking") and getattr(value, "__module__", None) == module.__name__:
                assert getattr(blocking, name) is value, name
                assert name in blocking.__all__
    assert blocking.ControllerFactory is streams.ControllerFactory


def test_the_root_names_the_blocking_classes_of_the_blocking_package() -> None:
    root = importlib.import_module("controller_client")
    for name in ("BlockingStreamManager", "BlockingEventStreamWriter", "BlockingReaderGroup", "BlockingTransaction"):
        assert getattr(root, name) is getattr(blocking, name)
