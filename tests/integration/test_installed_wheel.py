"""The package outside the repository (issue 13 item 7): the built wheel installed into a
fresh virtual environment in a temporary folder, then ``ditto-worker demo`` there (the
packaged sample conversation, since LoCoMo is not in the wheel) and a consumer program
type-checked with ``mypy --strict`` against the installed package (``py.typed``).

Slow (about a minute: the wheel, a venv with the dependencies from the pip index, mypy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONSUMER = '''
"""A service using ditto-worker's public API (type-checked with mypy --strict)."""

from __future__ import annotations

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import MemoryItem, NodeResult, Scope, create_memory
from ditto_worker.contracts import MemoryQueryOutput, MemorySearchResult
from ditto_worker.fleet import DittoClient


def remember(path: str, text: str) -> list[str]:
    memory = create_memory(SqliteMemoryStore(path), defaults={"searchLimit": 5})
    scope = Scope("acme", "alice")
    written: NodeResult[list[MemoryItem]] = memory.write(
        {"memories": [{"content": text, "metadata": {"kind": "note"}}]}, scope=scope
    )
    if written.status != "success" or written.output is None:
        return [written.error.code if written.error else written.status]
    page: NodeResult[MemoryQueryOutput] = memory.query(
        {"filter": {"createdAt": {"$gte": "2020-01-01T00:00:00+05:00"}}}, scope=scope
    )
    hits: NodeResult[list[MemorySearchResult]] = memory.search({"query": text}, scope=scope)
    found = [hit.memory.id for hit in hits.output or []]
    listed = [item.id for item in page.output.items] if page.output else []
    return [item.id for item in written.output] + listed + found


def client_type() -> type[DittoClient]:
    return DittoClient


if __name__ == "__main__":
    ids = remember("consumer.sqlite", "tea with milk")
    assert len(ids) == 3 and len(set(ids)) == 1, ids
    print("consumer ok")
'''


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args[:3]} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.serial  # builds in this checkout (build/, the egg-info): alone
def test_the_wheel_works_outside_the_repository(tmp_path: Path) -> None:
    assert REPO not in tmp_path.parents and not tmp_path.is_relative_to(REPO)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DITTO_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
         tmp_path, env)  # fmt: skip
    (wheel,) = dist.glob("ditto_worker-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for typed in ("ditto_worker", "ditto_plugin_sqlite", "ditto_plugin_postgres",
                  "ditto_plugin_mysql"):  # fmt: skip
        assert f"{typed}/py.typed" in names
    assert "ditto_worker/cli/samples/conversation.json" in names
    assert not [n for n in names if "locomo" in n.lower() and n.endswith(".json")]

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    bin_dir = venv / "bin"
    python = str(bin_dir / "python")
    _run([python, "-m", "pip", "install", "-q", str(wheel), f"mypy=={version('mypy')}"],
         tmp_path, env)  # fmt: skip
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run(["ditto-worker", "demo"], elsewhere, env, timeout=300)
    assert "the sample conversation" in out
    assert "43 turns written, 20 questions with evidence" in out
    assert "keyword evidence recall@10" in out and "MEMORY.SEARCH" in out

    (elsewhere / "consumer.py").write_text(textwrap.dedent(CONSUMER), encoding="utf-8")
    _run([python, "-m", "mypy", "--strict", "--no-incremental", "consumer.py"], elsewhere, env)
    assert "consumer ok" in _run([python, "consumer.py"], elsewhere, env)
