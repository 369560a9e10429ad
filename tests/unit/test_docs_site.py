"""The docs site's shape (issue 24): every page under docs/ is in the nav of mkdocs.yml, and
the README stays short. ``mkdocs build --strict`` (scripts/test.sh) checks links, anchors
and the API reference; conftest.py runs every code block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def _nav_files(entries: Any) -> set[str]:
    found: set[str] = set()
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found |= _nav_files(value) if isinstance(value, list) else {value}
    return found


def test_every_docs_page_is_in_the_nav() -> None:
    # mkdocs.yml has no custom YAML tags, so the safe loader reads it
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = _nav_files(config["nav"])
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    assert pages - in_nav == set(), "add these pages to the nav of mkdocs.yml"
    assert in_nav - pages == set(), "the nav names pages that do not exist"


def test_the_readme_is_short_and_points_into_the_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "bash scripts/test.sh" in readme and "ditto-worker demo" in readme
    for page in ("getting-started", "fleet", "configuration", "stores", "benchmarks"):
        assert f"(docs/{page}.md)" in readme, page


def test_the_strict_docs_build_sees_warnings() -> None:
    """``mkdocs build --quiet`` drops warnings before ``--strict`` counts them: the strict
    build of scripts/test.sh must not be quiet, or a broken API reference passes unseen."""
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    builds = [line for line in script.splitlines() if "mkdocs build" in line and "say " not in line]
    assert builds and all("--strict" in line for line in builds), builds
    assert not any("--quiet" in line or " -q " in line for line in builds), builds
