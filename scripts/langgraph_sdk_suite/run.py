"""Run langgraph-sdk's own store integration tests against a running ``ditto-worker
serve`` (issue 33 item 4).

Usage::

    python scripts/langgraph_sdk_suite/run.py --url http://127.0.0.1:PORT --api-key KEY
        [--cache DIR] [--json OUT]

The pinned sdist (langgraph-sdk, the version of ``constraints.txt``) is downloaded with
``pip download --no-binary :all: --no-deps`` into ``DIR`` (default
``.cache/langgraph-suites``, never committed) and unpacked; its
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
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parents[1]
SDK: Final = ("langgraph-sdk", "0.4.14", "langgraph_sdk")
SUITE: Final = "tests/integration/test_store.py"

sys.path.insert(0, str(HERE.parent / "langgraph_suites"))
from run import _venv  # noqa: E402  (the LangGraph suites' virtualenv, shared)


def _sdist(cache: Path) -> Path:
    """The unpacked root of the langgraph-sdk sdist (downloaded once)."""
    package, version, stem = SDK
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


def run_suite(url: str, api_key: str, cache: Path) -> dict[str, Any]:
    """Run the store tests against ``url``; their counts from the shim's per-test lines."""
    python, root = _venv(cache), _sdist(cache)
    report = cache / "report-sdk-store.jsonl"
    report.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(HERE), "LANGGRAPH_INTEGRATION_URL": url,
           "DITTO_SDK_API_KEY": api_key, "DITTO_SDK_REPORT": str(report),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    command = [str(python), "-m", "pytest", "-p", "ditto_sdk_shim", "-p", "no:cacheprovider",
               "-q", "-o", "addopts=", "-o", "asyncio_mode=auto", "-m", "integration",
               SUITE]  # fmt: skip
    out = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    failed = [x["nodeid"] for x in lines if x["outcome"] == "failed"]
    return {
        "file": f"{root.name}/{SUITE}",
        "exit": out.returncode,
        "tests": len(lines),
        "passed": sum(x["outcome"] == "passed" and x["requests"] > 0 for x in lines),
        "failed": len(failed),
        "skipped": sum(x["outcome"] == "skipped" for x in lines),
        "never_touched_ours": sum(x["outcome"] == "passed" and x["requests"] == 0 for x in lines),
        "failed_tests": failed,
        "tail": out.stdout[-3000:] if failed or not lines else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "langgraph-suites")
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
