"""What the LangGraph suite runners share: the pinned sdists, the virtualenv their tests
run in, and one pytest process of a suite's file read back through its shim's report.

Used by ``scripts/langgraph_suites/run.py`` (langgraph-checkpoint's store tests against
``DittoStore``) and ``scripts/langgraph_sdk_suite/run.py`` (langgraph-sdk's store tests
against ``ditto-worker serve``). Everything is made once under the cache folder
(:func:`default_cache`: ``~/.cache/ditto-worker/langgraph-suites``, or under
``$XDG_CACHE_HOME``; outside the checkout, so a fresh clone or a second worktree on the
same machine reuses it) and kept:

* :func:`sdist`: ``pip download --no-binary :all: --no-deps`` of one pinned sdist,
  unpacked (the suites' tests are not in the wheels);
* :func:`suite_venv`: a virtualenv with the suites' own test dependencies
  (:data:`TEST_DEPS`) that sees this interpreter's packages (ditto-worker, langgraph)
  through a ``.pth`` line;

Why reusing them is safe: an sdist is named by its pinned version, which PyPI never
changes; a virtualenv's folder is named by a SHA-256 of what it is made from —
:data:`TEST_DEPS`, this interpreter's version and prefix, and the site-packages folders its
``.pth`` line names — so a changed pin or another Python environment makes a new one, and
the packages under test (ditto-worker, langgraph) are never copied into it: the ``.pth``
line reads them live from this interpreter's environment. Each is made under an exclusive
lock (runs of several checkouts at once wait for one another) and marked ready last, so a
half-made one (a killed run) is made again.
* :func:`run_suite_file`: one test file as its own pytest process from its sdist's root
  (their ``tests`` package would collide with ours; they need ``asyncio_mode=auto``), with
  a shim plugin that writes one JSON line per test, summed up by :func:`summary`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from filelock import FileLock

__all__ = ["TEST_DEPS", "default_cache", "run_suite_file", "sdist", "suite_venv", "summary"]

TEST_DEPS: Final = ["pytest-asyncio==1.5.0", "pytest-mock==3.15.1", "aiosqlite==0.22.1",
                    "pytest-retry==1.7.0"]  # fmt: skip
"""The suites' own test dependencies (their ``test`` group), pinned: pytest-retry runs
the tests they mark ``flaky(retries=…)`` as their CI does."""


def default_cache() -> Path:
    """The cache folder: ``$XDG_CACHE_HOME/ditto-worker/langgraph-suites``, else
    ``~/.cache/ditto-worker/langgraph-suites``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ditto-worker" / "langgraph-suites"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing, with its folder) while the block runs
    (``filelock``: across processes, e.g. pytest-xdist workers and concurrent runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        yield


def sdist(cache: Path, package: str, version: str, stem: str) -> Path:
    """The unpacked root of ``package==version``'s sdist (``stem``: its file name's start),
    downloaded once into ``cache``."""
    root = cache / f"{stem}-{version}"
    ready = cache / f"{stem}-{version}.ready"
    if ready.exists():
        return root
    with _locked(cache / f"{stem}-{version}.lock"):
        if ready.exists():
            return root
        archive = cache / f"{stem}-{version}.tar.gz"
        if not archive.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary",
                            ":all:", "--no-deps", "-d", str(cache), f"{package}=={version}"],
                           check=True)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
        ready.touch()
    return root


def suite_venv(cache: Path) -> Path:
    """The suites' virtualenv (``cache/venv-KEY``; the module docstring says what KEY
    covers): their test dependencies of its own, and this interpreter's packages after
    them. Returns its ``python``."""
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    made_of = "\n".join([*TEST_DEPS, sys.version, sys.prefix, *ours])
    root = cache / f"venv-{hashlib.sha256(made_of.encode('utf-8')).hexdigest()[:16]}"
    python = root / "bin" / "python"
    marker = root / ".ready"
    if marker.exists():
        return python
    with _locked(root.with_suffix(".lock")):
        if marker.exists():
            return python
        venv.create(root, with_pip=True, clear=True)
        ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        found = subprocess.run([str(python), "-c", ask], check=True, capture_output=True,
                               text=True)  # fmt: skip
        purelib = found.stdout.strip()
        lines = [f"import site; site.addsitedir({p!r})" for p in ours]
        Path(purelib, "ditto_outer.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *TEST_DEPS], check=True)  # fmt: skip
        (root / "made-of.txt").write_text(made_of + "\n", encoding="utf-8")
        marker.touch()
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
