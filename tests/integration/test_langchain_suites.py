"""LangChain's standard suites (``langchain-tests`` 1.1.9: ``VectorStoreIntegrationTests``,
``BaseStoreSyncTests``, ``BaseStoreAsyncTests``) pass against our ``VectorStore`` and
``BaseStore`` (issue 33 item 2). They need ``asyncio_mode=auto``, so
``tests/peer_suites/langchain_suites.py`` runs as its own pytest process; every one of its
tests must pass (no skip, no expected failure)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_tests")

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "peer_suites" / "langchain_suites.py"
EXPECTED = {"TestDittoVectorStore": 25, "TestDittoByteStoreSync": 12, "TestDittoByteStoreAsync": 12}


def test_langchain_standard_suites_pass(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "-o", "addopts=", "-rA", "-q", "--basetemp", str(tmp_path / "t"), str(SUITES)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-5000:] + done.stderr[-2000:]
    passed = re.findall(r"^PASSED \S+::(\w+)::", out, re.M)
    counts = {cls: passed.count(cls) for cls in EXPECTED}
    assert counts == EXPECTED, out[-3000:]
    assert re.search(rf"^{sum(EXPECTED.values())} passed in ", out.splitlines()[-1]), out[-500:]
