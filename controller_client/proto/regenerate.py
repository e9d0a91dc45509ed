"""Regenerate the Python code of ``Controller.proto`` with ``grpc_tools.protoc``.

Run ``.venv/bin/python -m controller_client.proto.regenerate`` after editing the ``.proto``; it
rewrites ``Controller_pb2.py``, ``Controller_pb2.pyi`` and ``Controller_pb2_grpc.py`` next to it.
The generated files are committed; ``tests/controller_client/test_controller_proto.py`` checks
that a fresh generation reproduces them byte for byte, so never edit them by hand.

protoc writes ``import Controller_pb2 as Controller__pb2`` into the gRPC module, which only works
when the proto directory is on ``sys.path``; :func:`generate` turns it into a package-relative
import.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent
PROTO_FILE = "Controller.proto"
GENERATED_FILES = ("Controller_pb2.py", "Controller_pb2.pyi", "Controller_pb2_grpc.py")

_ABSOLUTE_IMPORT = "\nimport Controller_pb2 as Controller__pb2\n"
_RELATIVE_IMPORT = "\nfrom . import Controller_pb2 as Controller__pb2\n"


class RegenerationError(RuntimeError):
    """protoc failed or produced something this script does not expect."""


def generate(out_dir: Path, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Generate the three Python files of ``proto_dir/Controller.proto`` into ``out_dir``.

    Returns the paths written, in :data:`GENERATED_FILES` order. Raises :class:`RegenerationError`
    when protoc fails or the gRPC module lacks the import this function rewrites.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={proto_dir}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(proto_dir / PROTO_FILE),
    ]
    code = protoc.main(args)
    if code != 0:
        raise RegenerationError(f"protoc exited with status {code} for {proto_dir / PROTO_FILE}")
    grpc_module = out_dir / "Controller_pb2_grpc.py"
    text = grpc_module.read_text(encoding="utf-8")
    if text.count(_ABSOLUTE_IMPORT) != 1:
        raise RegenerationError(f"{grpc_module}: expected exactly one {_ABSOLUTE_IMPORT.strip()!r}")
    grpc_module.write_text(text.replace(_ABSOLUTE_IMPORT, _RELATIVE_IMPORT), encoding="utf-8")
    return [out_dir / name for name in GENERATED_FILES]


def main() -> int:
    for path in generate(PROTO_DIR):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
