"""segstore control plane: Controller.proto gRPC service, stream metadata, workflows."""

from segstore_shared import compat as _compat

_compat.install()  # old import paths of moved modules, for one release (CHANGELOG.md 0.2.0)
