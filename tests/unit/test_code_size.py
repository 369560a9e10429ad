"""Ratchets on the code's size (issue 34 item 4): figures that may only go down.

- **No module over 400 lines outside the tests** (STYLE.md). Library code is
  ``ditto_worker/`` (``ditto_worker/testing/`` included: plugin authors import it) and
  ``plugins/*/ditto_plugin_*/``; ``bench/`` and ``scripts/`` count too (code the project
  keeps and reads like the rest). Test code (``tests/``, ``plugins/*/tests/``, the
  ``conftest.py`` files) does not. :data:`OVER_400` lists today's offenders with their
  line counts: a listed module may shrink (lower its figure when it does), never grow; a
  module not listed may not pass 400. The target is an empty list.
- **Duplicated lines** that pylint's ``symilar`` finds (``symilar -d 8 -i
  --ignore-docstrings --ignore-imports``) over the non-test files of ``plugins/`` and of
  ``ditto_worker/``: at most :data:`DUPLICATES` (lower it when a change removes copies),
  with the target beside it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMIT = 400
# module -> its line count when it was listed (the most it may have); target: {}
OVER_400 = {
    "bench/store_scale.py": 696,
    "bench/crash_kills.py": 532,
    "bench/soak.py": 497,
    "bench/gateway.py": 405,
}
# folder -> (duplicated lines allowed today, the target)
DUPLICATES = {"plugins": (19, 30), "ditto_worker": (30, 30)}
SYMILAR = ["-d", "8", "-i", "--ignore-docstrings", "--ignore-imports"]


def _counted_modules() -> list[Path]:
    found = [*(REPO / "ditto_worker").rglob("*.py"), *(REPO / "bench").rglob("*.py")]
    found += (REPO / "scripts").rglob("*.py")
    found += (REPO / "plugins").glob("*/ditto_plugin_*/**/*.py")
    return sorted(p for p in found if "__pycache__" not in p.parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_outside_the_tests_passes_400_lines_or_grows_if_listed() -> None:
    sizes = {str(p.relative_to(REPO)): _lines(p) for p in _counted_modules()}
    assert "ditto_worker/testing/memory_store.py" in sizes  # the testing kit is counted
    over = {path: n for path, n in sizes.items() if n > LIMIT}
    new = {path: n for path, n in over.items() if path not in OVER_400}
    grown = {path: (OVER_400[path], n) for path, n in over.items() if n > OVER_400.get(path, n)}
    assert not new, f"modules over {LIMIT} lines (split them; STYLE.md): {new}"
    assert not grown, f"listed modules grew (listed, now): {grown}"


def _non_test_files(folder: str) -> list[str]:
    return sorted(
        str(p.relative_to(REPO))
        for p in (REPO / folder).rglob("*.py")
        if "tests" not in p.relative_to(REPO).parts and "__pycache__" not in p.parts
    )


@pytest.mark.parametrize("folder", sorted(DUPLICATES))
def test_duplicated_lines_stay_at_or_below_the_recorded_figure(folder: str) -> None:
    symilar = Path(sys.executable).parent / "symilar"
    if not symilar.exists():
        pytest.fail("symilar (pylint, in the dev extra) is missing: pip install -e '.[dev]'")
    done = subprocess.run(
        [str(symilar), *SYMILAR, *_non_test_files(folder)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    total = re.search(r"TOTAL lines=(\d+) duplicates=(\d+)", done.stdout)
    assert total, done.stdout[-2000:] + done.stderr[-2000:]
    duplicates, (allowed, target) = int(total.group(2)), DUPLICATES[folder]
    assert int(total.group(1)) > 1000  # the files were read
    print(f"\n{folder}: {duplicates} duplicated lines (allowed {allowed}, target {target})")
    assert duplicates <= allowed, (
        f"symilar {' '.join(SYMILAR)} finds {duplicates} duplicated lines in {folder}/, "
        f"more than {allowed}:\n{done.stdout[-4000:]}"
    )
