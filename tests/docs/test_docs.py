"""The documentation stays true: every Python example of README.md and docs/*.md runs as written and prints what its
comments say; every link between the pages leads somewhere; every repository file and every module they name exists.

A ``print(...)  # text`` line promises that a line of the output reads ``text``, in the order of those lines
(other output may come between): ``...`` in the text stands for anything, and a closing ``(remark)`` is a
remark, not output.

A block fenced as ```` ```python continued ```` goes on from the block before it on the same page (a quick start
in steps, one Python session): it runs appended to that block, as one example.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python( continued)?\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
PROMISE = re.compile(r"^\s*print\(.*\)\s+#\s*(?P<text>.+?)\s*$")
REMARK = re.compile(r"\s+\([^()]*\)$")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.(?:py|ipynb|json|yml|yaml|toml|proto))\b")
PACKAGES = ("segment_store", "controller_client", "controller", "pravega_spark", "segstore_shared", "segstore_cli")
MODULE = re.compile(rf"(?<![\w.])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)")
CODE_BLOCK = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)


def page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def examples(text: str) -> list[str]:
    """The page's examples: each ```python block, with the ```python continued blocks after it appended."""
    found: list[str] = []
    for block in BLOCK.finditer(text):
        if block[1]:
            assert found, "a ```python continued block needs a block before it"
            found[-1] += block[2]
        else:
            found.append(block[2])
    return found


EXAMPLES = [(page_name(page), index, code) for page in PAGES for index, code in enumerate(examples(page.read_text()))]


def promised_lines(example: str) -> list[re.Pattern[str]]:
    """What the example's ``print(...)  # text`` lines promise, as patterns of whole output lines."""
    patterns = []
    for line in example.splitlines():
        found = PROMISE.match(line)
        if found:
            text = REMARK.sub("", found["text"])
            patterns.append(re.compile(".*".join(re.escape(part) for part in text.split("..."))))
    return patterns


def test_promised_lines_with_wildcards_and_remarks() -> None:
    (pattern,) = promised_lines("print(x)   # 1000 b'order-...' (the first)")
    assert pattern.fullmatch("1000 b'order-17'") and not pattern.fullmatch("999 b'order-1'")
    assert promised_lines("x = 1  # not a print") == []


def test_continued_blocks_join_the_block_before() -> None:
    page = "```python\na = 1\n```\n\ntext\n\n```python continued\nprint(a)\n```\n\n```python\nb = 2\n```\n"
    assert examples(page) == ["a = 1\nprint(a)\n", "b = 2\n"]


def test_the_readme_and_the_docs_have_python_examples() -> None:
    assert examples((ROOT / "README.md").read_text()), "the README's quick start runs"
    assert len([page for page, _, _ in EXAMPLES if page.startswith("docs/")]) >= 10


EXAMPLE_TIMEOUT_S = 600
"""An example's limit (one with Spark takes 1-2 minutes on a quiet machine, several under load)."""


@pytest.mark.timeout(EXAMPLE_TIMEOUT_S + 60)
@pytest.mark.parametrize(("page", "index", "code"), EXAMPLES, ids=[f"{page}-{index}" for page, index, _ in EXAMPLES])
def test_example_runs(page: str, index: int, code: str, tmp_path: Path) -> None:
    """The example runs, prints what it promises, and leaves no temporary file or directory behind: it runs with
    ``TMPDIR`` a fresh directory (for it and the processes it starts; a JVM's own ``java.io.tmpdir`` is not
    covered), which must be empty at the end. It runs in a process group of its own, killed whole if it overruns
    (with the servers it started)."""
    cwd, temporary = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    temporary.mkdir()
    environment = {**os.environ, "TMPDIR": str(temporary)}
    with subprocess.Popen(
        [sys.executable, "-c", code], cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    ) as process:  # fmt: skip
        try:
            stdout, stderr = process.communicate(timeout=EXAMPLE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"{page} example {index} ran over {EXAMPLE_TIMEOUT_S} s:\n{code}\n{stderr[-4000:]}")
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert result.returncode == 0, f"{page} example {index} failed:\n{code}\n{result.stderr}"
    left = sorted(path.name for path in temporary.iterdir())
    assert left == [], f"{page} example {index} left temporary files behind: {left}"
    output = iter(line.strip() for line in result.stdout.splitlines())
    for pattern in promised_lines(code):
        assert any(pattern.fullmatch(line) for line in output), (
            f"{page} example {index}: no output line (in order) reads {pattern.pattern!r}:\n{result.stdout}"
        )


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (hyphens kept), spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = CODE_BLOCK.sub("", page.read_text())  # no headings in code
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        anchor, n = slug(heading), 1
        while anchor in found:  # GitHub numbers repeated headings
            anchor, n = f"{slug(heading)}-{n}", n + 1
        found.add(anchor)
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_links_between_pages_lead_somewhere(page: Path) -> None:
    text = CODE_BLOCK.sub("", page.read_text())
    for link in LINK.finditer(text):
        target = link["target"]
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page_name(page)}: {target} leads nowhere"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page_name(page)}: {target}: no such heading in {linked.name}"


def test_every_docs_page_is_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"({page.name})" in index or f"({page.name}#" in index, f"docs/README.md does not list {page.name}"


def _resolves(name: str) -> bool:
    """``a.b.c`` is a module, or an attribute of one (a moved module's old path resolves through the compat table)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # an old path, named as such
                found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_files_and_modules_named_exist(page: Path) -> None:
    text = page.read_text()
    for path in REPO_PATH.findall(text):
        assert (ROOT / path).exists(), f"{page_name(page)} names {path}, which is not in the repository"
    for code in re.findall(r"`([^`\n]+)`", CODE_BLOCK.sub("", text)):  # inline code: examples have variables
        for name in MODULE.findall(code):
            if name.endswith(".log"):
                continue  # a log file named like a module (controller.log), not a module
            assert _resolves(name), f"{page_name(page)} names {name}, which does not import"
