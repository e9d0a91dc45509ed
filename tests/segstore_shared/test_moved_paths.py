"""The old import paths of modules moved in 0.2.0 keep working for one release (``segstore_shared.compat``): the same
objects as at the new path, and a DeprecationWarning naming the new path (``python -m segment_store.cli``:
tests/segstore_cli/test_cli.py)."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from segstore_shared.compat import MOVED

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_imports_the_new_module_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    new = importlib.import_module(MOVED[old])
    assert any(issubclass(w.category, DeprecationWarning) and MOVED[old] in str(w.message) for w in caught)
    assert module.__doc__ == new.__doc__
    for name in (name for name in dir(new) if not name.startswith("_")):
        assert getattr(module, name) is getattr(new, name), name


def test_from_old_path_import_name_gives_the_same_class() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper as old
    from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper as new

    assert old is new


def test_a_name_nobody_moved_is_still_missing() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("segment_store.no_such_module")
