"""Every Python example in the README runs as written (the README stays true)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_python_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", EXAMPLES[index]], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"README example {index} failed:\n{EXAMPLES[index]}\n{result.stderr}"
