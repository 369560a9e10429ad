"""docs/stores-milvus.md: the ``ditto.yaml`` example is a valid ``plugins.milvus`` section
(its Python and shell blocks run through the root ``conftest.py``, docs/writing-docs.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ditto_plugin_milvus import create_store

PAGE = Path(__file__).resolve().parents[3] / "docs" / "stores-milvus.md"
TEXT = PAGE.read_text(encoding="utf-8")


def test_the_yaml_example_builds_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", TEXT, re.S)
    monkeypatch.chdir(tmp_path)
    store = create_store(yaml.safe_load(block)["plugins"]["milvus"], {})
    assert store.lite and store.collection == "ditto_memories"
    store.close()
