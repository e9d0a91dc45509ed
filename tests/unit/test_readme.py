"""Every Python example in the README runs as written and prints what its comments say (the README stays true).

A ``print(...)  # text`` line promises that a line of the output reads ``text``, in the order of those lines
(other output may come between): ``...`` in the text stands for anything, and a closing ``(remark)`` is a
remark, not output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
PROMISE = re.compile(r"^\s*print\(.*\)\s+#\s*(?P<text>.+?)\s*$")
REMARK = re.compile(r"\s+\([^()]*\)$")


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


def test_readme_has_python_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", EXAMPLES[index]], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"README example {index} failed:\n{EXAMPLES[index]}\n{result.stderr}"
    output = iter(line.strip() for line in result.stdout.splitlines())
    for pattern in promised_lines(EXAMPLES[index]):
        assert any(pattern.fullmatch(line) for line in output), (
            f"README example {index}: no output line (in order) reads {pattern.pattern!r}:\n{result.stdout}"
        )
