"""Run langgraph-sdk's own store integration tests against a running ``ditto-worker
serve`` (issue 33 item 4).

Usage::

    python scripts/langgraph_sdk_suite/run.py --url http://127.0.0.1:PORT --api-key KEY
        [--cache DIR] [--json OUT]

The pinned sdist (langgraph-sdk, the version of ``constraints.txt``) is downloaded with
``pip download --no-binary :all: --no-deps`` into ``DIR`` (default
``~/.cache/ditto-worker/langgraph-suites``: ``suite_env.default_cache``) and unpacked; its
``tests/integration/test_store.py`` runs as its own pytest process from the sdist's root
with ``-m integration`` (its conftest probes ``GET /ok`` and skips everything if that
fails: a skip counts as a failure here) in the virtualenv of
``scripts/langgraph_suites/run.py``. The plugin ``ditto_sdk_shim`` gives the tests' raw
httpx clients the key (header ``x-api-key``) and counts each test's requests. Prints one
JSON object: passed / failed / skipped / never touched the server, and the failed tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parents[1]
SDK: Final = ("langgraph-sdk", "0.4.14", "langgraph_sdk")
SUITE: Final = "tests/integration/test_store.py"

sys.path.insert(0, str(HERE.parent / "langgraph_suites"))
from suite_env import default_cache, run_suite_file, sdist, suite_venv, summary  # noqa: E402  (shared)


def run_suite(url: str, api_key: str, cache: Path) -> dict[str, Any]:
    """Run the store tests against ``url``; their counts from the shim's per-test lines."""
    python, root = suite_venv(cache), sdist(cache, *SDK)
    report = cache / f"report-sdk-store-{os.getpid()}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(HERE), "LANGGRAPH_INTEGRATION_URL": url,
           "DITTO_SDK_API_KEY": api_key, "DITTO_SDK_REPORT": str(report),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    args = ["-m", "integration", SUITE]
    out, lines = run_suite_file(python, root, "ditto_sdk_shim", args, env, report, 600)
    return {"file": f"{root.name}/{SUITE}", **summary(out, lines, "requests")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    result = run_suite(args.url, args.api_key, args.cache)
    print(json.dumps({k: v for k, v in result.items() if k != "tail"}), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
