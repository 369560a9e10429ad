"""docs/stores-milvus.md: every Python block runs as written, and the ``ditto.yaml``
example is a valid ``plugins.milvus`` section (STYLE.md "Docs")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ditto_plugin_milvus import create_store

PAGE = Path(__file__).resolve().parents[3] / "docs" / "stores-milvus.md"
TEXT = PAGE.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"{PAGE.name}[{index}]", "exec"), {"__name__": "__doc__"})


def test_the_yaml_example_builds_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", TEXT, re.S)
    monkeypatch.chdir(tmp_path)
    store = create_store(yaml.safe_load(block)["plugins"]["milvus"], {})
    assert store.lite and store.collection == "ditto_memories" and BLOCKS
    store.close()
