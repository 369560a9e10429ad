"""Run LangGraph's own store tests against ditto-worker's ``DittoStore`` (issue 33 item 1).

Usage::

    python scripts/langgraph_suites/run.py [--cache DIR] [--store sqlite|postgres|fleet ...]
        [--suite checkpoint:tests/test_store.py ...] [--jobs N] [--json OUT]

The pinned sdists (langgraph-checkpoint 4.3.2, langgraph-checkpoint-sqlite 3.1.2) are
downloaded with ``pip download --no-binary :all: --no-deps`` into ``DIR`` (default
``.cache/langgraph-suites``, never committed) and unpacked; each test file runs as its own
pytest process from its sdist's root (their ``tests`` package would collide with ours; they
need ``asyncio_mode=auto``) in a virtualenv of its own under ``DIR`` (made once, then
reused), which sees this interpreter's packages (ditto-worker) through a ``.pth`` line. The
plugin ``ditto_lg_shim`` rebinds their stores to ours and records per test how many times
ours was built. Every (file, store) pair is its own process, ``--jobs`` of them at a time
(default 4: the files are mostly waiting on sleeps and node calls). Prints one JSON object
per file and store: passed / failed / skipped / never touched ours, the failed tests and
the seconds it took.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import site
import subprocess
import sys
import tarfile
import time
import venv
from pathlib import Path
from typing import Any, Final

PINS: Final = {"checkpoint": ("langgraph-checkpoint", "4.3.2", "langgraph_checkpoint"),
               "sqlite": ("langgraph-checkpoint-sqlite", "3.1.2",
                          "langgraph_checkpoint_sqlite")}  # fmt: skip
SUITES: Final = ["checkpoint:tests/test_store.py", "sqlite:tests/test_store.py",
                 "sqlite:tests/test_async_store.py", "sqlite:tests/test_ttl.py"]  # fmt: skip
TEST_DEPS: Final = ["pytest-asyncio==1.5.0", "pytest-mock==3.15.1", "aiosqlite==0.22.1",
                    "pytest-retry==1.7.0"]  # fmt: skip
"""The suites' own test dependencies (their ``test`` group), pinned: pytest-retry runs
the tests they mark ``flaky(retries=…)`` as their CI does."""
HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parents[1]


def _sdist(cache: Path, name: str) -> Path:
    """The unpacked root of sdist ``name`` (downloaded once)."""
    package, version, stem = PINS[name]
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


def _venv(cache: Path) -> Path:
    """The suites' virtualenv: pytest-asyncio, pytest-mock, aiosqlite of its own, and this
    interpreter's packages (ditto-worker, langgraph-checkpoint) after them."""
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


def run_file(python: Path, root: Path, path: str, store: str, cache: Path) -> dict[str, Any]:
    """Run one test file; its counts from the shim's per-test lines."""
    report = cache / f"report-{root.name}-{Path(path).stem}-{store}-{os.getpid()}.jsonl"
    report.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(HERE), "DITTO_LG_STORE": store,
           "DITTO_LG_REPORT": str(report), "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    command = [str(python), "-m", "pytest", "-p", "ditto_lg_shim", "-p", "no:cacheprovider",
               "-q", "-o", "addopts=", "-o", "asyncio_mode=auto", path]  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    report.unlink(missing_ok=True)
    failed = [x["nodeid"] for x in lines if x["outcome"] == "failed"]
    return {
        "file": f"{root.name}/{path}",
        "store": store,
        "exit": out.returncode,
        "tests": len(lines),
        "passed": sum(x["outcome"] == "passed" and x["built"] > 0 for x in lines),
        "failed": len(failed),
        "skipped": sum(x["outcome"] == "skipped" for x in lines),
        "never_touched_ours": sum(x["outcome"] == "passed" and x["built"] == 0 for x in lines),
        "failed_tests": failed,
        "seconds": round(time.monotonic() - started, 1),
        "tail": out.stdout[-3000:] if failed or not lines else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "langgraph-suites")
    parser.add_argument("--store", action="append", choices=["sqlite", "postgres", "fleet"],
                        help="the store under ours (repeatable; default sqlite)")  # fmt: skip
    parser.add_argument(
        "--suite", action="append", help="sdist:path, e.g. sqlite:tests/test_ttl.py"
    )
    parser.add_argument("--jobs", type=int, default=4, help="test processes at a time")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    python = _venv(args.cache)
    runs = [(_sdist(args.cache, suite.split(":", 1)[0]), suite.split(":", 1)[1], store)
            for store in args.store or ["sqlite"] for suite in args.suite or SUITES]  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        futures = [pool.submit(run_file, python, root, path, store, args.cache)
                   for root, path, store in runs]  # fmt: skip
        results = [future.result() for future in futures]
    for result in results:
        print(json.dumps({k: v for k, v in result.items() if k != "tail"}), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
