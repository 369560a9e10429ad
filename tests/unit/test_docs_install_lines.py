"""What an integration page says to install is enough for its own examples.

A reader copies the page's ``pip install …`` line, then its code blocks. Each module a
block imports (``langgraph.graph``, ``mcp.client.stdio`` …) must come from a distribution
that those install lines bring: ditto-worker with the extras named, the packages named,
and everything they depend on. The ``langgraph`` extra brings ``langgraph-checkpoint``
only (the store), whose ``langgraph`` namespace also holds LangGraph's ``langgraph.graph``:
so the check resolves each imported module to the file it loads and the distribution that
installed that file, never by its top-level name alone.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").glob("integrations-*.md"))
_INSTALL = re.compile(r"`pip install ([^`]+)`")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _named(page: str) -> list[Requirement]:
    """Every requirement of the page's inline ``pip install`` lines."""
    found: list[Requirement] = []
    for line in _INSTALL.findall(page):
        found += [Requirement(word.strip("'\"")) for word in line.split() if word[0] != "-"]
    return found


def _closure(named: list[Requirement]) -> set[str]:
    """The canonical names of the named distributions and everything they depend on."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in named]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue  # not installed here: its imports fail below, naming the module
        for text in requires:
            req = Requirement(text)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {name for name, _ in seen}


def _imports(page: str) -> set[str]:
    """The absolute modules the page's Python blocks import (stdlib and ours left out)."""
    modules: set[str] = set()
    for block in _BLOCK.findall(page):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Import):
                modules |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module)
    ours_or_stdlib = {m for m in modules if m.split(".")[0] in sys.stdlib_module_names}
    ours_or_stdlib |= {m for m in modules if m.startswith("ditto_")}
    return modules - ours_or_stdlib


def _installed_by(module: str) -> set[str]:
    """The distributions whose recorded files include the file ``module`` loads from."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"{module} is not importable in this venv"
    origin = Path(spec.origin).resolve()
    owners: set[str] = set()
    for dist_name in md.packages_distributions().get(module.split(".")[0], []):
        dist = md.distribution(dist_name)
        if any(Path(str(dist.locate_file(f))).resolve() == origin for f in dist.files or []):
            owners.add(canonicalize_name(dist_name))
    assert owners, f"no installed distribution recorded {origin}"
    return owners


def test_there_are_integration_pages() -> None:
    assert {p.name for p in PAGES} >= {
        "integrations-langgraph.md",
        "integrations-langchain.md",
        "integrations-mcp.md",
    }


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_install_lines_bring_every_imported_module(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    named = _named(text)
    assert any(canonicalize_name(r.name) == "ditto-worker" for r in named), "no install line"
    brought = _closure(named)
    missing = {m: sorted(_installed_by(m)) for m in sorted(_imports(text))}
    missing = {m: owners for m, owners in missing.items() if not brought & set(owners)}
    assert missing == {}, f"{page.name}: its pip install lines do not bring {missing}"


def test_the_check_sees_a_missing_package() -> None:
    # langgraph.graph is LangGraph's, not langgraph-checkpoint's (the langgraph extra)
    brought = _closure([Requirement("ditto-worker[langgraph]")])
    assert "langgraph-checkpoint" in brought
    assert not brought & _installed_by("langgraph.graph")
    assert brought & _installed_by("langgraph.store.base")
