"""segstore's data plane: the segment store service (engine, wire protocol, server)."""

from segstore_shared import compat as _compat

_compat.install()  # old import paths of moved modules, for one release (CHANGELOG.md 0.2.0)


__version__ = "0.2.0"
