"""``__all__`` of every ``ditto_worker.infer`` module lists exactly its public names
(STYLE.md), and importing the package starts nothing."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import ditto_worker.infer

MODULES = ["", ".contracts", ".endpoint", ".llm", ".local", ".worker"]


@pytest.mark.parametrize("suffix", [*MODULES, "config"])
def test_all_matches_public_names(suffix: str) -> None:
    name = "ditto_worker.config.infer" if suffix == "config" else "ditto_worker.infer" + suffix
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(set(exported)) == len(exported)
    assert all(hasattr(module, name) for name in exported)
    tree = ast.parse(Path(str(module.__file__)).read_text())
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif suffix == "" and isinstance(node, ast.ImportFrom) and node.module != "__future__":
            defined |= {a.asname or a.name for a in node.names}
    assert {n for n in defined if not n.startswith("_")} - set(exported) == set()


def test_importing_the_package_loads_no_model_and_opens_nothing() -> None:
    code = (
        "import sys, ditto_worker.infer as i; i.create_infer_worker(env={}, dotenv_path=None); "
        "print('xllamacpp' in sys.modules, 'ditto_worker.infer.local' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert ditto_worker.infer.INFER_GENERATE == "INFER.GENERATE"
