"""The package outside the repository (issue 13 item 7): the built wheel installed into a
fresh virtual environment in a temporary folder, then ``ditto-worker demo`` there (the
packaged sample conversation, since LoCoMo is not in the wheel) and a consumer program
type-checked with ``mypy --strict`` against the installed package (``py.typed``).

The wheel is the one this run builds once for this test and the package gate
(:func:`tests.integration._package_kit.built_package`); the venv is new, its third-party
dependencies (at the versions of ``constraints.txt``) come from a per-machine cache keyed by
the wheel's requirements (:func:`tests.integration._package_kit.fresh_venv`, where it says
why that is safe; ``DITTO_CONSTRAINTS=none`` resolves them from the index again).

Slow (the build, once per run; the first run on a machine also makes the dependency
environment; mypy).
"""

from __future__ import annotations

import os
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.integration._package_kit import REPO, built_package, clean_env, fresh_venv, run

__all__ = ["built_package"]  # the fixture, shared with test_package_gate.py
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


@pytest.mark.slow
@pytest.mark.serial  # the build writes in this checkout (build/, the egg-info): alone
def test_the_wheel_works_outside_the_repository(
    tmp_path: Path, built_package: tuple[Path, Path]
) -> None:
    assert REPO not in tmp_path.parents and not tmp_path.is_relative_to(REPO)
    env = clean_env()
    _, wheel = built_package
    names = zipfile.ZipFile(wheel).namelist()
    for typed in ("ditto_worker", "ditto_plugin_sqlite", "ditto_plugin_postgres",
                  "ditto_plugin_mysql"):  # fmt: skip
        assert f"{typed}/py.typed" in names
    assert "ditto_worker/cli/samples/conversation.json" in names
    assert not [n for n in names if "locomo" in n.lower() and n.endswith(".json")]

    bin_dir = fresh_venv(tmp_path / "venv", wheel, "", env)
    python = str(bin_dir / "python")
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run(["ditto-worker", "demo"], elsewhere, env, timeout=300)
    assert "the sample conversation" in out
    assert "43 turns written, 20 questions with evidence" in out
    assert "keyword evidence recall@10" in out and "MEMORY.SEARCH" in out

    (elsewhere / "consumer.py").write_text(textwrap.dedent(CONSUMER), encoding="utf-8")
    run([python, "-m", "mypy", "--strict", "--no-incremental", "consumer.py"], elsewhere, env)
    assert "consumer ok" in run([python, "consumer.py"], elsewhere, env)
