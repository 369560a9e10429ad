"""docs/cli.md runs as written (STYLE.md "Docs"): its bash and Python blocks run, and each
``text`` block's ``$ command`` prints the lines the page shows (execution ids aside)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
TEXT = PAGE.read_text(encoding="utf-8")
BASH = re.findall(r"```bash\n(.*?)```", TEXT, re.S)
PYTHON = re.findall(r"```python\n(.*?)```", TEXT, re.S)
SHOWN = re.findall(r"```text\n\$ (.*?)\n(.*?)```", TEXT, re.S)
ENV = {**os.environ, "DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": ""}
BIN = Path(sys.executable).parent  # ditto-worker and celery of this environment


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**ENV, "PATH": f"{BIN}{os.pathsep}{ENV.get('PATH', '')}"}
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_page_has_examples() -> None:
    assert len(BASH) == 1 and len(PYTHON) == 1 and len(SHOWN) >= 3


def test_the_bash_block_runs(tmp_path: Path) -> None:
    result = _run("set -e\n" + BASH[0], tmp_path)
    assert result.returncode == 0, result.stderr
    write, mine, theirs = (json.loads(line) for line in result.stdout.splitlines())
    assert write["status"] == "success"
    assert [m["content"] for m in mine["output"]] == ["tea"] and theirs["output"] == []


def test_the_python_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(PYTHON[0], "docs/cli.md", "exec"), {"__name__": "__doc__"})


@pytest.mark.parametrize(("command", "shown"), SHOWN, ids=[c for c, _ in SHOWN])
def test_each_shown_command_prints_what_the_page_says(
    command: str, shown: str, tmp_path: Path
) -> None:
    result = _run(command, tmp_path)
    printed = result.stdout.splitlines() + [
        line for line in result.stderr.splitlines() if " WARNING " not in line
    ]
    printed = [re.sub(r'"executionId": "[^"]+"', '"executionId": "…"', p) for p in printed]
    assert shown.strip().splitlines() == printed, result.stderr
