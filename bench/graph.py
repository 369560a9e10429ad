"""What Graphs and loops cost and gain on a fleet (issue 17 item 7), interleaved rounds.

One Redis and ONE worker process (threads pool, ``--concurrency`` slots, >= 10) serve a
test worker kind ``BENCH``: ``BENCH.SLEEP`` waits ``sleepMs`` on its cancel token (a node
that waits, not one that computes: these boxes have 2 cores), ``BENCH.NOOP`` returns
``{}``. The caller is ``create_ditto(..., broker)``: the fleet client. Each round measures
every path once in a fixed order and rounds repeat (``--rounds``), so a noisy neighbour
hits every path alike; medians over rounds are reported, with the range.

1. Fan-out: a Graph of 10 independent ``BENCH.SLEEP`` (100 ms) nodes through
   ``runtime.run`` vs the same 10 calls one after another through ``runtime.invoke``.
   Target: sequence / Graph >= 2.5x.
2. Per-node overhead of a Graph over a bare call, sequential, p50 per call:
   ``await runtime.arun(<one BENCH.NOOP node>)`` vs ``await runtime.ainvoke("BENCH.NOOP")``
   (target arun / ainvoke <= 1.2x); and, for the record, the sync pair ``run`` / ``invoke``
   (``run`` starts an event loop per call) and a fan-out of 10 NOOP nodes through
   ``arun`` vs ``asyncio.gather`` of 10 ``ainvoke``.
3. A loop of 1,024 one-node Graphs (``BENCH.NOOP``): Graphs/s (and the same 1,024 calls
   as sequential ``ainvoke`` calls/s for scale); embedded as well (no broker).

    python bench/graph.py                       # throwaway redis-server, 5 rounds
    python bench/graph.py --rounds 7 --calls 300 --concurrency 12
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loops import p50_ms, p50_ms_async, redis_option, round_row, run_worker, with_redis  # noqa: E402

FAN_OUT = 10
SLEEP_MS = 100
LOOP_GRAPHS = 1024


def bench_kind() -> Any:
    """The BENCH worker kind (a definition; data, no I/O)."""
    from ditto_worker.runtime import NodeContext, NodeSpec, WorkerDefinition

    def sleep(input: Any, ctx: NodeContext) -> dict[str, Any]:
        ctx.cancel.wait(float(input.get("sleepMs", SLEEP_MS)) / 1000)
        return {}

    return WorkerDefinition.of(
        "BENCH",
        [NodeSpec("BENCH.SLEEP", sleep), NodeSpec("BENCH.NOOP", lambda input, ctx: {})],
        concurrency=16,
    )


def serve(redis_url: str, concurrency: int) -> None:
    """Run the benchmark's one worker process."""
    from ditto_worker.config import load_runtime_config
    from ditto_worker.fleet.launch import create_worker_app

    config = load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={})
    run_worker(create_worker_app(config, [bench_kind]), "threads", concurrency, "bench-graph")


def fan_out_graph() -> Any:
    from ditto_worker import graph

    plan = graph("fan-out")
    for i in range(FAN_OUT):
        plan = plan.node(f"n{i}", "BENCH.SLEEP", [], lambda _i, _r: {"sleepMs": SLEEP_MS})
    return plan


def noop_graph(width: int = 1) -> Any:
    from ditto_worker import graph

    plan = graph("noop")
    for i in range(width):
        plan = plan.node(f"n{i}", "BENCH.NOOP", [], lambda _i, _r: {})
    return plan


def seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def loop_rate(runtime: Any) -> float:
    graph = noop_graph()

    def plan(_: Any) -> Generator[Any, Any, int]:
        for _ in range(LOOP_GRAPHS):
            result = yield graph, None
            assert result.status == "success", result
        return LOOP_GRAPHS

    start = time.perf_counter()
    result = runtime.loop(plan, None, budget=LOOP_GRAPHS)
    elapsed = time.perf_counter() - start
    assert result.status == "success" and len(result.graphs) == LOOP_GRAPHS, result.error
    return LOOP_GRAPHS / elapsed


def ainvoke_rate(runtime: Any) -> float:
    async def run() -> float:
        start = time.perf_counter()
        for _ in range(LOOP_GRAPHS):
            result = await runtime.ainvoke("BENCH.NOOP", {})
            assert result.status == "success", result
        return LOOP_GRAPHS / (time.perf_counter() - start)

    return asyncio.run(run())


def _row(label: str, values: list[float], unit: str, digits: int = 3) -> str:
    return round_row(label, values, unit, digits, widths=(50, 8))


def measure(fleet: Any, embedded: Any, args: argparse.Namespace) -> dict[str, list[float]]:
    fan = fan_out_graph()
    one, ten = noop_graph(), noop_graph(FAN_OUT)
    sleep_in = {"sleepMs": SLEEP_MS}

    async def gather_ten() -> Any:
        results = await asyncio.gather(*(fleet.ainvoke("BENCH.NOOP", {}) for _ in range(FAN_OUT)))
        assert all(r.status == "success" for r in results)
        return results[0]

    rounds: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        rounds.setdefault(key, []).append(value)

    for _ in range(args.rounds):
        add("graph_s", seconds(lambda: _ok(fleet.run(fan, None))))
        add("seq_s", seconds(lambda: [_ok(fleet.invoke("BENCH.SLEEP", sleep_in))
                                      for _ in range(FAN_OUT)]))  # fmt: skip
        add("arun", p50_ms_async(lambda: fleet.arun(one, None), args.calls))
        add("ainvoke", p50_ms_async(lambda: fleet.ainvoke("BENCH.NOOP", {}), args.calls))
        add("run", p50_ms(lambda: fleet.run(one, None), args.calls))
        add("invoke", p50_ms(lambda: fleet.invoke("BENCH.NOOP", {}), args.calls))
        add("arun10", p50_ms_async(lambda: fleet.arun(ten, None), args.calls // 4))
        add("gather10", p50_ms_async(gather_ten, args.calls // 4))
        add("loop", loop_rate(fleet))
        add("seq_ainvoke", ainvoke_rate(fleet))
        add("e_arun", p50_ms_async(lambda: embedded.arun(one, None), args.calls))
        add("e_ainvoke", p50_ms_async(lambda: embedded.ainvoke("BENCH.NOOP", {}), args.calls))
        add("e_loop", loop_rate(embedded))
    return rounds


def _ok(result: Any) -> Any:
    assert result.status == "success", result
    return result


def ratios(rounds: dict[str, list[float]], top: str, bottom: str) -> list[float]:
    return [a / b for a, b in zip(rounds[top], rounds[bottom], strict=True)]


def report(rounds: dict[str, list[float]], args: argparse.Namespace) -> None:
    print(f"graph bench: one worker process, threads pool -c {args.concurrency}, task events "
          f"on; {args.rounds} interleaved rounds (median of rounds, range)")  # fmt: skip
    print(f"{'':<50}{'median':>10} {'':<8}{'range':>18}")
    print(f"1. fan-out of {FAN_OUT} x BENCH.SLEEP {SLEEP_MS} ms")
    print(_row("   runtime.run(Graph of 10 independent nodes)", rounds["graph_s"], "s"))
    print(_row("   the same 10 calls in sequence (invoke)", rounds["seq_s"], "s"))
    print(_row("   speed-up sequence / Graph (target >= 2.5)", ratios(rounds, "seq_s", "graph_s"),
               "x", 2))  # fmt: skip
    print("2. per-node overhead, BENCH.NOOP, p50 per call")
    print(_row("   await arun(one-node Graph)", rounds["arun"], "ms"))
    print(_row("   await ainvoke", rounds["ainvoke"], "ms"))
    print(_row("   arun / ainvoke (target <= 1.2)", ratios(rounds, "arun", "ainvoke"), "x", 2))
    print(_row("   run(one-node Graph), sync", rounds["run"], "ms"))
    print(_row("   invoke, sync", rounds["invoke"], "ms"))
    print(_row("   run / invoke", ratios(rounds, "run", "invoke"), "x", 2))
    print(_row("   await arun(Graph of 10 NOOP nodes)", rounds["arun10"], "ms"))
    print(_row("   await gather(10 x ainvoke)", rounds["gather10"], "ms"))
    print(_row("   arun(10) / gather(10)", ratios(rounds, "arun10", "gather10"), "x", 2))
    print(_row("   embedded: await arun(one-node Graph)", rounds["e_arun"], "ms"))
    print(_row("   embedded: await ainvoke", rounds["e_ainvoke"], "ms"))
    print(_row("   embedded: arun / ainvoke", ratios(rounds, "e_arun", "e_ainvoke"), "x", 2))
    print(f"3. loop of {LOOP_GRAPHS} one-node Graphs (BENCH.NOOP)")
    print(_row("   fleet: Graphs/s", rounds["loop"], "/s", 0))
    print(_row(f"   fleet: {LOOP_GRAPHS} sequential ainvoke, calls/s", rounds["seq_ainvoke"],
               "/s", 0))  # fmt: skip
    print(_row("   embedded: Graphs/s", rounds["e_loop"], "/s", 0))


def run(redis_url: str, args: argparse.Namespace) -> None:
    from ditto_worker import create_ditto
    from ditto_worker.config import load_runtime_config

    if args.concurrency < FAN_OUT:
        raise SystemExit(f"--concurrency must be >= {FAN_OUT} (the fan-out)")
    worker_log = tempfile.TemporaryFile("w+")  # the worker's banner and warnings
    worker = subprocess.Popen([sys.executable, __file__, "--serve", redis_url,
                               str(args.concurrency)], stdout=worker_log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    config = load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={})
    fleet = create_ditto([bench_kind()], config)
    embedded = create_ditto([bench_kind()], load_runtime_config(None, env={}))
    try:
        deadline = time.monotonic() + 60
        while fleet.invoke("BENCH.NOOP", {}, timeout=2).status != "success":
            if worker.poll() is not None or time.monotonic() > deadline:
                worker_log.seek(0)
                raise SystemExit(f"the worker did not start:\n{worker_log.read()[-3000:]}")
        for _ in range(3):  # warm up every path
            _ok(fleet.run(fan_out_graph(), None))
            p50_ms_async(lambda: fleet.arun(noop_graph(), None), 50)
            p50_ms_async(lambda: fleet.ainvoke("BENCH.NOOP", {}), 50)
        report(measure(fleet, embedded, args), args)
    finally:
        fleet.close()
        embedded.close()
        worker.terminate()
        worker.wait(30)
        worker_log.close()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    redis_option(parser)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=200, help="sequential calls per path/round")
    parser.add_argument("--concurrency", type=int, default=10, help="worker thread slots (>= 10)")
    args = parser.parse_args()
    with_redis(args.redis, lambda url: run(url, args))


if __name__ == "__main__":
    main()
