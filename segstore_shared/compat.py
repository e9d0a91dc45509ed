"""Old import paths of modules that moved in 0.2.0 (see CHANGELOG.md), kept working for one release.

:func:`install` puts one finder on ``sys.meta_path`` that answers only for the old names in :data:`MOVED`: importing
one gives a module that hands every attribute over to the module at the new path (the same objects, so classes and
functions are identical), with a ``DeprecationWarning`` naming the new path. ``python -m <old path>`` runs the new
module as ``__main__``. A name not in the table is left to the normal import system. Remove in 0.3.0.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

MOVED: dict[str, str] = {
    # tools left the engine
    "segment_store.cli": "segstore_cli.main",
    "segment_store.demo": "segstore_cli.demo",
    "segment_store.admin": "segstore_cli.admin",
    "segment_store.selftest": "segstore_cli.selftest",
    "segment_store.auth.cli": "segstore_cli.commands.auth",
    "controller.cli": "segstore_cli.commands.controller",
    "controller.standalone": "segstore_cli.standalone",
    # the controller's periodic work and cluster code by concern
    "controller.background": "controller.periodic.background",
    "controller.retention": "controller.periodic.retention",
    "controller.watermarking": "controller.periodic.watermarking",
    "controller.autoscaler": "controller.periodic.autoscaler",
    "controller.buckets": "controller.cluster.buckets",
    # what several services share went to segstore_shared
    "segment_store.errors": "segstore_shared.errors",
    "segment_store.contracts": "segstore_shared.contracts",
    "segment_store.auth": "segstore_shared.auth",
    "segment_store.auth.acl": "segstore_shared.auth.acl",
    "segment_store.auth.passwords": "segstore_shared.auth.passwords",
    "segment_store.auth.settings": "segstore_shared.auth.settings",
    "segment_store.auth.tls": "segstore_shared.auth.tls",
    "segment_store.auth.tokens": "segstore_shared.auth.tokens",
    "segment_store.coordination": "segstore_shared.coordination",
    "segment_store.coordination.store": "segstore_shared.coordination.store",
    "segment_store.coordination.kazoo_store": "segstore_shared.coordination.kazoo_store",
    "segment_store.coordination.memory_store": "segstore_shared.coordination.memory_store",
    "segment_store.coordination.zookeeper_server": "segstore_shared.coordination.zookeeper_server",
    "segment_store.cluster.assignment": "segstore_shared.cluster.layout",
    "segment_store.cluster.registration": "segstore_shared.cluster.registration",
    "segment_store.containers.mapping": "segstore_shared.cluster.container_mapping",
    "segment_store.child_process": "segstore_shared.processes",
    "segment_store.metrics_http": "segstore_shared.metrics_http",
    # the engine's folders by concern
    "segment_store.containers.metadata": "segment_store.metadata",
    "segment_store.tier1.tier1_config": "segment_store.tier1.config",
    "segment_store.tier1.file_ledger_log": "segment_store.tier1.file.ledger_log",
    "segment_store.tier1.file_ledger_config": "segment_store.tier1.file.config",
    "segment_store.tier1.ledger_file": "segment_store.tier1.file.ledger_file",
    "segment_store.tier1.jetstream_log": "segment_store.tier1.jetstream.log",
    "segment_store.tier1.jetstream_config": "segment_store.tier1.jetstream.config",
    "segment_store.tier1.jetstream_factory": "segment_store.tier1.jetstream.factory",
    "segment_store.tier1.nats_server": "segment_store.tier1.jetstream.nats_server",
    "segment_store.storage.fs_chunk_storage": "segment_store.storage.backends.filesystem",
    "segment_store.storage.s3_chunk_storage": "segment_store.storage.backends.s3",
    "segment_store.storage.memory_chunk_storage": "segment_store.storage.backends.memory",
    "segment_store.storage.faulty_chunk_storage": "segment_store.storage.backends.faulty",
    "segment_store.storage.seaweedfs_server": "segment_store.storage.backends.seaweedfs_server",
    "segment_store.storage.system_journal": "segment_store.storage.journal.system_journal",
    "segment_store.storage.chunk_metadata": "segment_store.storage.journal.chunk_metadata",
    "segment_store.storage.parquet_chunk": "segment_store.storage.format.parquet_chunk",
    "segment_store.storage.event_frames": "segstore_shared.event_frames",
    # the client library by feature
    "controller_client.controller_api": "controller_client.controller.api",
    "controller_client.controller_channel": "controller_client.controller.channel",
    "controller_client.proto_convert": "controller_client.controller.proto_convert",
    "controller_client.event_writer": "controller_client.writers.event_writer",
    "controller_client.routing": "controller_client.writers.routing",
    "controller_client.txn_writer": "controller_client.writers.txn_writer",
    "controller_client.stream_reader": "controller_client.readers.stream_reader",
    "controller_client.reader_group": "controller_client.reader_groups.group",
    "controller_client.event_stream_reader": "controller_client.reader_groups.reader",
    "controller_client.reader_group_format": "controller_client.reader_groups.format",
    "controller_client.key_value_table": "controller_client.kvt.table",
    "controller_client.kvt_errors": "controller_client.kvt.errors",
    "controller_client.kvt_model": "controller_client.kvt.model",
    "controller_client.kvt_blocking": "controller_client.blocking.kvt",
    "controller_client.reader_group_blocking": "controller_client.blocking.reader_groups",
    # the Spark connector by concern
    "pravega_spark.source": "pravega_spark.read.source",
    "pravega_spark.stream_cut_text": "pravega_spark.options.stream_cut_text",
    "pravega_spark.lag": "pravega_spark.read.lag",
    "pravega_spark.sink": "pravega_spark.write.sink",
}


class _MovedModule(types.ModuleType):
    """The module at an old path: every attribute is the new module's."""

    def __init__(self, name: str, target: types.ModuleType) -> None:
        super().__init__(name, target.__doc__)
        self.__dict__["_target"] = target
        if hasattr(target, "__path__"):
            self.__path__: list[str] = []  # a package: its old submodules are found by the finder too

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_target"], name)

    def __dir__(self) -> list[str]:
        return dir(self.__dict__["_target"])


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers the old names of :data:`MOVED` (or of the table it was given) with the new modules."""

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = self.moved[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new} (segstore 0.2.0); the old path goes in 0.3.0", DeprecationWarning, stacklevel=2
        )
        return _MovedModule(spec.name, importlib.import_module(new))

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the new module ran when it was imported."""

    def get_code(self, fullname: str) -> types.CodeType:
        """``python -m <old path>``: run the new module as ``__main__``."""
        source = f"import runpy\nrunpy.run_module({self.moved[fullname]!r}, run_name='__main__', alter_sys=True)\n"
        return compile(source, f"<moved {fullname}>", "exec")


def install() -> None:
    """Put the finder on ``sys.meta_path`` once per process (idempotent)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder(MOVED))
