"""What the LangGraph suite runners share: the pinned sdists, the virtualenv their tests
run in, and one pytest process of a suite's file read back through its shim's report.

Used by ``scripts/langgraph_suites/run.py`` (langgraph-checkpoint's store tests against
``DittoStore``) and ``scripts/langgraph_sdk_suite/run.py`` (langgraph-sdk's store tests
against ``ditto-worker serve``). Everything is made once under the cache folder (default
``.cache/langgraph-suites``, never committed) and reused:

* :func:`sdist`: ``pip download --no-binary :all: --no-deps`` of one pinned sdist,
  unpacked (the suites' tests are not in the wheels);
* :func:`suite_venv`: a virtualenv with the suites' own test dependencies
  (:data:`TEST_DEPS`) that sees this interpreter's packages (ditto-worker, langgraph)
  through a ``.pth`` line;
* :func:`run_suite_file`: one test file as its own pytest process from its sdist's root
  (their ``tests`` package would collide with ours; they need ``asyncio_mode=auto``), with
  a shim plugin that writes one JSON line per test, summed up by :func:`summary`.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import tarfile
import venv
from pathlib import Path
from typing import Any, Final

__all__ = ["TEST_DEPS", "run_suite_file", "sdist", "suite_venv", "summary"]

TEST_DEPS: Final = ["pytest-asyncio==1.5.0", "pytest-mock==3.15.1", "aiosqlite==0.22.1",
                    "pytest-retry==1.7.0"]  # fmt: skip
"""The suites' own test dependencies (their ``test`` group), pinned: pytest-retry runs
the tests they mark ``flaky(retries=…)`` as their CI does."""


def sdist(cache: Path, package: str, version: str, stem: str) -> Path:
    """The unpacked root of ``package==version``'s sdist (``stem``: its file name's start),
    downloaded once into ``cache``."""
    root = cache / f"{stem}-{version}"
    if root.is_dir():
        return root
    archive = cache / f"{stem}-{version}.tar.gz"
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                        "--no-deps", "-d", str(cache), f"{package}=={version}"],
                       check=True)  # fmt: skip
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return root


def suite_venv(cache: Path) -> Path:
    """The suites' virtualenv (``cache/venv``, made again when :data:`TEST_DEPS` change):
    their test dependencies of its own, and this interpreter's packages after them. Returns
    its ``python``."""
    root = cache / "venv"
    python = root / "bin" / "python"
    marker = root / ".ready"
    ready = " ".join(TEST_DEPS) + "\n"
    if marker.exists() and marker.read_text(encoding="utf-8") == ready:
        return python
    venv.create(root, with_pip=True, clear=True)
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    found = subprocess.run([str(python), "-c", ask], check=True, capture_output=True, text=True)
    purelib = found.stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = [f"import site; site.addsitedir({p!r})" for p in ours]
    Path(purelib, "ditto_outer.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *TEST_DEPS], check=True)  # fmt: skip
    marker.write_text(ready, encoding="utf-8")
    return python


def run_suite_file(
    python: Path,
    root: Path,
    shim: str,
    args: list[str],
    env: dict[str, str],
    report: Path,
    timeout_s: float,
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run ``pytest -p shim ARGS`` from the sdist's ``root`` in the suites' virtualenv;
    ``env`` (the whole environment) names ``report``, where the shim writes one JSON
    line per test. Returns the process and those lines (the report is removed)."""
    report.unlink(missing_ok=True)
    command = [str(python), "-m", "pytest", "-p", shim, "-p", "no:cacheprovider", "-q",
               "-o", "addopts=", "-o", "asyncio_mode=auto", *args]  # fmt: skip
    out = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                         timeout=timeout_s)  # fmt: skip
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    report.unlink(missing_ok=True)
    return out, lines


def summary(
    out: subprocess.CompletedProcess[str], lines: list[dict[str, Any]], touched: str
) -> dict[str, Any]:
    """The counts of one file's run: a test passed only when it reached ours (its
    ``touched`` count > 0, else ``never_touched_ours``); the failed tests' ids; the
    output's tail when something failed or no test reported."""
    failed = [x["nodeid"] for x in lines if x["outcome"] == "failed"]
    return {
        "exit": out.returncode,
        "tests": len(lines),
        "passed": sum(x["outcome"] == "passed" and x[touched] > 0 for x in lines),
        "failed": len(failed),
        "skipped": sum(x["outcome"] == "skipped" for x in lines),
        "never_touched_ours": sum(x["outcome"] == "passed" and x[touched] == 0 for x in lines),
        "failed_tests": failed,
        "tail": out.stdout[-3000:] if failed or not lines else "",
    }
