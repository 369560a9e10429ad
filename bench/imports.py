"""Import time of the SDK and the store plugins, each in a fresh interpreter.

Usage: ``python bench/imports.py [--runs 15]``

Prints the median and min of ``import ditto_worker, ditto_plugin_sqlite`` (target < 150 ms,
issue 11) measured inside a new interpreter each run (interpreter start-up excluded), the
same for the other layers, and which heavy modules each import loaded.

Imports are measured with bytecode caching on, as for a package pip installed (pip
compiles ``.pyc`` files at install; an editable checkout writes them on first import): the
probes unset ``PYTHONDONTWRITEBYTECODE`` (set on some machines, this one included) and a
warm-up import writes the caches first. Without cached bytecode for this package (e.g.
``PYTHONDONTWRITEBYTECODE=1`` in a fresh checkout) every one of its modules is compiled at
each import: about 60 ms more for SDK + SQLite on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = r"""
import json, sys, time
t = time.perf_counter()
for name in sys.argv[1].split(","):
    __import__(name)
elapsed = time.perf_counter() - t
heavy = [m for m in ("celery", "kombu", "redis", "torch", "sentence_transformers", "psycopg",
                     "pydantic", "yaml") if m in sys.modules]
print(json.dumps({"s": elapsed, "heavy": heavy}))
"""

CASES = [
    ("SDK + SQLite plugin", "ditto_worker,ditto_plugin_sqlite"),
    ("baseline: pydantic+yaml", "pydantic,yaml"),
    ("SDK (ditto_worker)", "ditto_worker"),
    ("contracts", "ditto_worker.contracts"),
    ("PostgreSQL plugin", "ditto_worker,ditto_plugin_postgres"),
    ("retrieval (no model)", "ditto_worker.retrieval"),
    ("fleet (Celery)", "ditto_worker.fleet"),
]


def measure(modules: str, runs: int) -> tuple[list[float], list[str]]:
    times: list[float] = []
    heavy: list[str] = []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PROBE, modules], check=True,
                             capture_output=True, text=True, env=env).stdout  # fmt: skip
        report = json.loads(out.strip().splitlines()[-1])
        times.append(report["s"] * 1000)
        heavy = report["heavy"]
    return times, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for _, modules in CASES:  # warm-up: write the bytecode caches
        measure(modules, 1)
    # interleaved: each run measures every case once, so load that drifts (a shared
    # machine) weighs on every case alike
    times: dict[str, list[float]] = {label: [] for label, _ in CASES}
    heavy: dict[str, list[str]] = {}
    for _ in range(args.runs):
        for label, modules in CASES:
            sample, heavy[label] = measure(modules, 1)
            times[label] += sample
    print(f"{'import':<24} {'median ms':>10} {'min ms':>8}  heavy modules loaded")
    for label, _ in CASES:
        print(f"{label:<24} {statistics.median(times[label]):>10.1f} "
              f"{min(times[label]):>8.1f}  {', '.join(heavy[label]) or '-'}")  # fmt: skip
    sdk = times[CASES[0][0]]
    verdict = "met" if statistics.median(sdk) < 150 else "NOT met"
    print(f"target: SDK + SQLite plugin < 150 ms median (cached bytecode): {verdict}")


if __name__ == "__main__":
    main()
