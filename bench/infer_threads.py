"""The local model's generation threads (``workers.infer.local.threads``) on this machine.

Starts the packaged local model once per setting and block (A B … B A over ``--threads``,
so a change in the machine's load hits every setting alike), runs the same short
preference-extraction prompts as ``bench/infer.py`` straight against the model server
(its ``direct`` path: no handler, no fleet), and prints per setting: the model's start
time, p50 / p95 / max latency per call, the server's own decode speed (median
``timings.predicted_per_second``) and the ratio of each setting's p50 to the first one's,
side by side. The machine's load average is printed before and after: the figures mean
something only next to it (issue 25: ``threads: 0`` took 20-60 s per call on a loaded
2-core machine, 2-5 s with 1).

    python bench/infer_threads.py                       # threads 1 and 2, 6 prompts, A B B A
    python bench/infer_threads.py --threads 1,2,4 --prompts 8 --rounds 2
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ditto_worker.infer import LocalModelSettings  # noqa: E402
from ditto_worker.infer.local import LocalModelServer  # noqa: E402


def _bench_infer() -> Any:
    """``bench/infer.py`` as a module (its prompts and its ``direct`` path)."""
    path = Path(__file__).resolve().parent / "infer.py"
    spec = importlib.util.spec_from_file_location("bench_infer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_infer"] = module
    spec.loader.exec_module(module)
    return module


def run_block(infer: Any, threads: int, n_prompts: int) -> tuple[float, list[Any]]:
    """Start the model with ``threads``, one warm-up call, then ``n_prompts`` calls."""
    t0 = time.perf_counter()
    server = LocalModelServer.start(LocalModelSettings(threads=threads))
    start_s = time.perf_counter() - t0
    try:
        call = infer.direct_path(server.base_url, server.model)
        batch = infer.prompts(n_prompts)
        call(batch[-1])
        return start_s, [call(p) for p in batch]
    finally:
        server.stop()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated settings")
    parser.add_argument("--prompts", type=int, default=6, help="calls per block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per setting (A B B A)")
    args = parser.parse_args()
    settings = [int(t) for t in args.threads.split(",")]
    infer = _bench_infer()
    load_before = os.getloadavg()
    starts: dict[int, list[float]] = {t: [] for t in settings}
    calls: dict[int, list[Any]] = {t: [] for t in settings}
    for r in range(args.rounds):
        for threads in settings if r % 2 == 0 else list(reversed(settings)):
            start_s, done = run_block(infer, threads, args.prompts)
            starts[threads].append(start_s)
            calls[threads] += done
            print(f"  round {r + 1}: threads={threads} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(f"cores: {os.cpu_count()}; load average (1/5/15 min) before "
          f"{'/'.join(f'{x:.1f}' for x in load_before)}, after "
          f"{'/'.join(f'{x:.1f}' for x in load_after)}")  # fmt: skip
    print(f"{'threads':>7} {'calls':>5} {'start s':>8} {'p50 s':>7} {'p95 s':>7} "
          f"{'max s':>7} {'decode tok/s':>12} {'p50 ratio':>9}")  # fmt: skip
    base: float | None = None
    for threads in settings:
        latencies = [c.latency_s for c in calls[threads]]
        decode = [c.decode_tok_s for c in calls[threads] if c.decode_tok_s]
        p50 = statistics.median(latencies)
        base = p50 if base is None else base
        print(f"{threads:>7} {len(latencies):>5} {statistics.median(starts[threads]):>8.1f} "
              f"{p50:>7.2f} {_pct(latencies, 0.95):>7.2f} {max(latencies):>7.2f} "
              f"{statistics.median(decode) if decode else float('nan'):>12.1f} "
              f"{p50 / base:>9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
