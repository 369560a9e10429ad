"""docs/operation-ids.md: every Python block runs as written (STYLE.md "Docs")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operation-ids.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"{PAGE.name}[{index}]", "exec"), {"__name__": "__doc__"})
