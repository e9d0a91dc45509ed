"""The notebooks under ``notebooks/`` run from top to bottom in a fresh kernel of this interpreter.

Each notebook starts its own ``segstore standalone`` and SparkSession as children of its kernel; nbclient
runs every cell (an error in any cell fails the test). The kernel is a kernelspec written to a temporary
``JUPYTER_PATH`` pointing at ``sys.executable``, so the venv's packages are used and nothing is installed.
The kernel's descendants are looked up every 0.2 s while it runs and, if still running at the end, stopped by
pid: a notebook that failed before its own clean-up cell leaves nothing behind. The kernel's own output (where
the Spark JVM writes) goes to a file whose tail is part of a failure's message.

The notebooks are committed with the outputs of a run, so that browsing the repository shows the plots:
``./run notebooks --refresh`` (``SEGSTORE_REFRESH_NOTEBOOKS=1``) writes a passing run's outputs back into
``notebooks/``, and ``test_the_committed_notebooks_carry_a_runs_outputs`` checks they are there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL_NAME = "segstore-venv"
CELL_TIMEOUT_S = 120
STOP_GRACE_S = 10.0
KERNEL_LOG_TAIL = 6000
REFRESH = os.environ.get("SEGSTORE_REFRESH_NOTEBOOKS") == "1"
FIGURES = {"quickstart.ipynb": 1, "explore_stream.ipynb": 2, "stream_as_table.ipynb": 1}


def _kernelspec(root: Path) -> None:
    """A kernelspec named KERNEL_NAME running ipykernel on this interpreter, with inline matplotlib figures."""
    spec = root / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    kernel = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "segstore (.venv)",
        "language": "python",
        "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"},
    }
    (spec / "kernel.json").write_text(json.dumps(kernel))


def _running(process: Any) -> bool:
    """Still the process we saw (psutil checks its start time) and not a zombie waiting for its parent."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _stop(processes: dict[int, Any]) -> None:
    """SIGTERM every remembered process still running, then SIGKILL the ones still there after a grace period."""
    import psutil

    alive = [p for p in processes.values() if _running(p)]
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended meanwhile
            process.terminate()
    _, still = psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    for process in still:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


class _NotebookFailed(Exception):
    """A cell failed; the message starts with the tail of the kernel's output (where the Spark JVM writes)."""

    def __init__(self, message: str, jvm_did_not_start: bool) -> None:
        super().__init__(message)
        self.jvm_did_not_start = jvm_did_not_start  # it exited before giving PySpark its port


def _run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, float]:
    """Execute ``notebooks/<name>`` in a fresh kernel; return the executed notebook and the seconds it took.

    A Spark JVM that exits before it starts (``JAVA_GATEWAY_EXITED``, seen once in CI on a loaded
    machine) gets one more whole attempt, with a warning carrying the kernel's output; any other
    failure, or a second one, fails the test with the kernel's output first and no traceback (CI
    shows the start of a failure's report).
    """
    message = ""
    for attempt in (1, 2):
        try:
            return _execute(name, tmp_path / f"attempt-{attempt}", monkeypatch)
        except _NotebookFailed as failure:
            message = str(failure)
            if attempt == 2 or not failure.jvm_did_not_start:
                break
            warnings.warn(f"{name}: the Spark JVM did not start; running it again. {message}", stacklevel=1)
    pytest.fail(message, pytrace=False)  # outside the except clause: no chained traceback before the message


def _execute(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, float]:
    import nbformat
    import psutil
    from nbclient import NotebookClient

    tmp_path.mkdir()
    _kernelspec(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the notebook's temporary directories land here
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    started: dict[int, psutil.Process] = {}
    done = threading.Event()

    def remember() -> None:
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        if pid is None:
            return
        try:
            for child in psutil.Process(pid).children(recursive=True):
                started.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def watch() -> None:
        while not done.wait(0.2):
            remember()

    watcher = threading.Thread(target=watch, name="notebook-children", daemon=True)
    watcher.start()
    began = time.monotonic()
    kernel_log = tmp_path / "kernel.log"  # the kernel's and its children's (the JVM's) stdout and stderr
    try:
        with kernel_log.open("wb") as log:
            client.execute(stdout=log, stderr=log)
    except Exception as error:
        tail = kernel_log.read_text(errors="replace")[-KERNEL_LOG_TAIL:]
        message = f"{name} failed; the kernel's output ends with:\n{tail}\n---\n{str(error)[-3000:]}"
        raise _NotebookFailed(message, "JAVA_GATEWAY_EXITED" in str(error)) from error
    finally:
        done.set()
        watcher.join()
        _stop(started)
    return notebook, time.monotonic() - began


def _text(notebook: Any) -> str:
    """Every stream and text/plain output of the executed notebook, joined."""
    parts: list[str] = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
    return "\n".join(parts)


def _keep_outputs(name: str, executed: Any) -> None:
    """With ``SEGSTORE_REFRESH_NOTEBOOKS=1``: the executed cells' outputs and counts into ``notebooks/<name>``
    (the committed cells' sources and every metadata kept as they are)."""
    if not REFRESH:
        return
    import nbformat

    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    for kept, ran in zip(committed.cells, executed.cells, strict=True):
        if kept.cell_type == "code":
            kept.outputs = ran.outputs
            kept.execution_count = ran.execution_count
    nbformat.write(committed, NOTEBOOKS / name)


def _figures(notebook: Any) -> int:
    return sum(
        1
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "display_data" and "image/png" in output.get("data", {})
    )


def _errors(notebook: Any) -> list[str]:
    return [
        f"cell {index}: {output.get('ename')}: {output.get('evalue')}"
        for index, cell in enumerate(notebook.cells)
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


@pytest.mark.slow
def test_quickstart_notebook_runs_and_plots_events_per_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notebook, seconds = _run("quickstart.ipynb", tmp_path, monkeypatch)
    text = _text(notebook)
    assert not _errors(notebook), _errors(notebook)
    assert "segstore standalone ready" in text
    assert "wrote 1000 orders" in text
    assert "batch read: 1000 events in 3 segments" in text
    assert re.search(r"streaming query: 1000 events in [2-9]\d* micro-batches", text), text
    assert "wrote 3200 readings in 5 bursts" in text and "read 3200 readings" in text
    assert "standalone exited with 0" in text
    assert _figures(notebook) == FIGURES["quickstart.ipynb"]
    _keep_outputs("quickstart.ipynb", notebook)
    print(f"quickstart.ipynb: {seconds:.1f} s")


@pytest.mark.slow
def test_explore_stream_notebook_runs_and_draws_scaling_chunks_and_lag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook, seconds = _run("explore_stream.ipynb", tmp_path, monkeypatch)
    text = _text(notebook)
    assert not _errors(notebook), _errors(notebook)
    assert "segstore standalone ready" in text
    assert re.search(r"wrote \d+ events; the stream is now in epoch 3", text), text
    assert "4 epochs, 7 segments" in text
    chunks = re.search(r"(\d+) chunks", text)
    assert chunks and int(chunks.group(1)) >= 2, text
    assert re.search(r"\d+ rows, \['offset', 'event', 'ingest_time_ms', 'framed'\]", text), text
    read = re.search(r"the query read (\d+) of 4000 events", text)
    assert read and 0 < int(read.group(1)) < 4000, text
    lag = re.search(r"lag: (\d+) bytes in total", text)
    assert lag and int(lag.group(1)) > 0, text
    assert "standalone exited with 0" in text
    quiet = [w for w in ("SegmentIsSealedError", "Traceback") if w in text]  # a scale and a stop are normal
    assert not quiet, text
    assert _figures(notebook) == FIGURES["explore_stream.ipynb"]
    _keep_outputs("explore_stream.ipynb", notebook)
    print(f"explore_stream.ipynb: {seconds:.1f} s")


@pytest.mark.slow
def test_stream_as_table_notebook_runs_duckdb_sql_next_to_a_live_query_and_both_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook, seconds = _run("stream_as_table.ipynb", tmp_path, monkeypatch)
    text = _text(notebook)
    assert not _errors(notebook), _errors(notebook)  # the cell asserting both sides agree raised nothing
    assert "segstore standalone ready" in text
    wrote = re.search(
        r"wrote (\d+) orders; at the last sample while writing the table had (\d+), the live query (\d+)", text
    )
    assert wrote and int(wrote.group(1)) >= 10_000, text  # 15 s at 1,000 a second, give or take the pacing
    assert re.search(r"\d+ rows; the table's current snapshot has \d+ data files", text), text
    assert "standalone exited with 0" in text
    assert "Traceback" not in text, text
    assert _figures(notebook) == FIGURES["stream_as_table.ipynb"]
    _keep_outputs("stream_as_table.ipynb", notebook)
    print(f"stream_as_table.ipynb: {seconds:.1f} s")


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_the_committed_notebooks_carry_a_runs_outputs(name: str) -> None:
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    unrun = [index for index, cell in enumerate(code) if cell.execution_count is None]
    assert not unrun, f"{name}: code cells {unrun} have no output of a run: ./run notebooks --refresh"
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), f"{name}: not one run"
    assert _figures(notebook) == FIGURES[name] and not _errors(notebook), name
