"""pyspark finds ``format("segstore")`` and ``format("segstore-kvt")`` however segstore is installed.

pyspark registers the ``DefaultSource`` of every top-level module named ``pyspark_*`` that
``pkgutil.iter_modules()`` lists (``pyspark/sql/worker/lookup_data_sources.py``), and ``pkgutil`` only lists
modules of ``sys.path`` directories: an install that serves the project's modules through an import hook (as
setuptools' default editable mode does for a flat layout) leaves them out, and pyspark answers
``DATA_SOURCE_NOT_FOUND`` unless the working directory happens to be the repository.

Each test installs a copy of the project into a fresh venv, with ``pip --no-deps --no-index --no-build-isolation``
(offline: the dependencies are those of this interpreter's site-packages, seen through a ``.pth`` in the new
venv that points at a directory of links to them, segstore's own install left out), then runs
``spark_check.py`` with that venv's interpreter from a directory outside the repository against a
``segstore standalone``: a write, a batch read and a streaming read through ``format("segstore")``, and a
``format("segstore-kvt")`` read that must fail with the source's own option error.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CHECK_SCRIPT = Path(__file__).with_name("spark_check.py")
DATA_SOURCE_MODULES = ["pyspark_segstore", "pyspark_segstore_kvt"]
PIP_OFFLINE = ("--no-deps", "--no-index", "--no-build-isolation", "--disable-pip-version-check", "--quiet")


def _project_copy(dest: Path) -> Path:
    """What the build needs, as pyproject.toml declares it: its top-level modules and packages, the README."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    dest.mkdir()
    for name in ["pyproject.toml", config["project"]["readme"], *config["project"].get("license-files", [])]:
        shutil.copy2(REPO / name, dest / name)
    for module in setuptools.get("py-modules", []):
        shutil.copy2(REPO / f"{module}.py", dest / f"{module}.py")
    patterns = setuptools["packages"]["find"]["include"]
    for entry in sorted(REPO.iterdir()):
        if (entry / "__init__.py").is_file() and any(fnmatch.fnmatch(entry.name, p) for p in patterns):
            shutil.copytree(entry, dest / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _is_segstore_install(name: str) -> bool:
    """An entry of site-packages that is segstore's own install (editable or not), not a dependency."""
    own_modules = {
        "segstore_shared",
        "segment_store",
        "controller",
        "controller_client",
        "pravega_spark",
        "segstore_cli",
        *DATA_SOURCE_MODULES,
    }
    return name.startswith(("segstore-", "__editable__")) or name.removesuffix(".py") in own_modules


def _dependencies(dest: Path) -> Path:
    """A directory of links to this interpreter's site-packages entries, segstore's own install left out."""
    dest.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not _is_segstore_install(entry.name):
            (dest / entry.name).symlink_to(entry)
    return dest


def _run(command: list[str], cwd: Path, timeout_s: float) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    result = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s
    )
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited with {result.returncode}:\n{result.stdout[-6000:]}", pytrace=False)
    return result.stdout


def _venv(path: Path, dependencies: Path) -> Path:
    """A fresh venv without pip whose site-packages sees ``dependencies``; its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], path, 60)
    site_line = f"import site; site.addsitedir({str(dependencies)!r})\n"  # their own .pth files too
    (Path(purelib.strip()) / "segstore-test-dependencies.pth").write_text(site_line)
    return python


def _pip_install(python: Path, *target: str, cwd: Path) -> None:
    """This interpreter's pip installs into the venv of ``python`` (``pip --python``), offline."""
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", *PIP_OFFLINE, *target], cwd, 300)


class Installs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.project = _project_copy(root / "project")
        self.dependencies = _dependencies(root / "dependencies")
        wheels = root / "wheels"
        _run([sys.executable, "-m", "pip", "wheel", *PIP_OFFLINE, "-w", str(wheels), str(self.project)], root, 300)
        (self.wheel,) = wheels.glob("segstore-*.whl")

    def venv(self, name: str) -> Path:
        return _venv(self.root / name, self.dependencies)


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> Installs:
    return Installs(tmp_path_factory.mktemp("installs"))


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("install-standalone")) as process:
        yield process


def _elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the repository, with a copy of the check script."""
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    assert not workdir.resolve().is_relative_to(REPO)
    shutil.copy2(CHECK_SCRIPT, workdir / CHECK_SCRIPT.name)
    return workdir


def _check(python: Path, workdir: Path, standalone: StandaloneProcess, stream: str) -> dict[str, object]:
    listed = _run(
        [str(python), "-c", "import json, pkgutil; print(json.dumps([m.name for m in pkgutil.iter_modules()]))"],
        workdir,
        60,
    )
    assert set(DATA_SOURCE_MODULES) <= set(json.loads(listed)), "pkgutil.iter_modules() misses the data source modules"
    out = _run([str(python), CHECK_SCRIPT.name, standalone.controller_uri, stream], workdir, 400)
    (line,) = [line for line in out.splitlines() if line.startswith("RESULT ")]
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    assert result["batch_rows"] == 100, result
    assert result["streaming_rows"] == 100, result
    kvt_error = str(result["kvt_error"])
    assert "tabel" in kvt_error and "did you mean 'table'" in kvt_error, kvt_error
    return result


def test_install_from_wheel_finds_the_data_sources_from_any_directory(
    installs: Installs, standalone: StandaloneProcess, tmp_path: Path
) -> None:
    python = installs.venv("wheel-venv")
    _pip_install(python, str(installs.wheel), cwd=tmp_path)
    result = _check(python, _elsewhere(tmp_path), standalone, "wheel")
    assert Path(str(result["pravega_spark"])).is_relative_to(installs.root / "wheel-venv"), result


def test_default_editable_install_finds_the_data_sources_from_any_directory(
    installs: Installs, standalone: StandaloneProcess, tmp_path: Path
) -> None:
    python = installs.venv("editable-venv")
    _pip_install(python, "-e", str(installs.project), cwd=tmp_path)  # setuptools' default editable mode
    result = _check(python, _elsewhere(tmp_path), standalone, "editable")
    assert Path(str(result["pravega_spark"])).is_relative_to(installs.project), result
