"""Run LangGraph's own store tests against ditto-worker's ``DittoStore`` (issue 33 item 1).

Usage::

    python scripts/langgraph_suites/run.py [--cache DIR] [--store sqlite|postgres|fleet ...]
        [--suite checkpoint:tests/test_store.py ...] [--jobs N] [--json OUT]

The pinned sdists (langgraph-checkpoint 4.3.2, langgraph-checkpoint-sqlite 3.1.2) are
downloaded with ``pip download --no-binary :all: --no-deps`` into ``DIR`` (default
``~/.cache/ditto-worker/langgraph-suites``: ``suite_env.default_cache``) and unpacked;
each test file runs as its own pytest process from its sdist's root (their ``tests``
package would collide with ours; they need ``asyncio_mode=auto``) in a virtualenv of its
own under ``DIR`` (made once per pin and Python environment, then reused), which sees
this interpreter's packages (ditto-worker) through a ``.pth`` line (:mod:`suite_env`,
shared with ``scripts/langgraph_sdk_suite/run.py``). The plugin ``ditto_lg_shim``
rebinds their stores to ours and records per test how many times ours was built. Every
(file, store) pair is its own process, ``--jobs`` of them at a time (default 4: the
files are mostly waiting on sleeps and node calls). Prints one JSON object per file and
store: passed / failed / skipped / never touched ours, the failed tests and the seconds it took.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

from suite_env import default_cache, run_suite_file, sdist, suite_venv, summary

PINS: Final = {"checkpoint": ("langgraph-checkpoint", "4.3.2", "langgraph_checkpoint"),
               "sqlite": ("langgraph-checkpoint-sqlite", "3.1.2",
                          "langgraph_checkpoint_sqlite")}  # fmt: skip
SUITES: Final = ["checkpoint:tests/test_store.py", "sqlite:tests/test_store.py",
                 "sqlite:tests/test_async_store.py", "sqlite:tests/test_ttl.py"]  # fmt: skip
HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parents[1]


def run_file(python: Path, root: Path, path: str, store: str, cache: Path) -> dict[str, Any]:
    """Run one test file; its counts from the shim's per-test lines."""
    report = cache / f"report-{root.name}-{Path(path).stem}-{store}-{os.getpid()}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(HERE), "DITTO_LG_STORE": store,
           "DITTO_LG_REPORT": str(report), "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    started = time.monotonic()
    out, lines = run_suite_file(python, root, "ditto_lg_shim", [path], env, report, 900)
    counts = summary(out, lines, "built")
    return {"file": f"{root.name}/{path}", "store": store, **counts,
            "seconds": round(time.monotonic() - started, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--store", action="append", choices=["sqlite", "postgres", "fleet"],
                        help="the store under ours (repeatable; default sqlite)")  # fmt: skip
    parser.add_argument(
        "--suite", action="append", help="sdist:path, e.g. sqlite:tests/test_ttl.py"
    )
    parser.add_argument("--jobs", type=int, default=4, help="test processes at a time")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    python = suite_venv(args.cache)
    runs = [(sdist(args.cache, *PINS[suite.split(":", 1)[0]]), suite.split(":", 1)[1], store)
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
