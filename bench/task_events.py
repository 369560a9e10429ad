"""What Celery task events cost per call, counted on Redis (issue 36 item 4).

One throwaway redis-server; for each setting of ``--events`` in turn (default
``on,off,on,off``) a fresh prefork worker process of ``bench/fleet_overhead.py`` (the
fleet's MEMORY and BENCH kinds, ``fleet.taskEvents`` as given) and a ``DittoClient`` with
the same setting; after a warm-up, ``--calls`` sequential ``BENCH.NOOP`` calls, and around
them Redis's ``INFO commandstats`` and ``total_net_input_bytes`` / ``..._output_bytes``.
Prints per call: Redis commands (the busiest named), bytes written to and read from Redis,
and the wall time (the only figure that depends on the machine's load). Figures and their
reading: docs/fleet.md "What task events cost".

    python bench/task_events.py
    python bench/task_events.py --calls 500 --events on,off
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fleet_overhead as fo  # bench/, next to this file

from ditto_worker.testing.servers import RedisServer


def _stats(redis: Any) -> tuple[dict[str, int], int, int]:
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in redis.info("commandstats").items()}
    stats = redis.info("stats")
    return calls, int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


def measure(url: str, events: bool, calls: int) -> str:
    """One line of figures for one ``fleet.taskEvents`` setting."""
    import redis

    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    folder = Path(tempfile.mkdtemp(prefix="bench-events-"))
    db = str(folder / "bench.sqlite")
    flag = "on" if events else "off"
    worker = subprocess.Popen([sys.executable, fo.__file__, "--serve", url, db, "prefork", "1",
                               flag])  # fmt: skip
    client = DittoClient.from_fleet(FleetSettings(broker_url=url, task_events=events),
                                    nodes=fo.client_table(db))  # fmt: skip
    server = redis.Redis.from_url(url)
    try:
        for _ in range(30):  # the worker is up and warm
            client.invoke("BENCH.NOOP", {}, timeout=120)
        before = _stats(server)
        started = time.perf_counter()
        for _ in range(calls):
            assert client.invoke("BENCH.NOOP", {}, timeout=120).status == "success"
        wall_ms = (time.perf_counter() - started) / calls * 1000
        after = _stats(server)
    finally:
        client.close()
        worker.terminate()
        worker.wait(60)
        shutil.rmtree(folder, ignore_errors=True)
    per = {k: (n - before[0].get(k, 0)) / calls for k, n in after[0].items()}
    per = {k: v for k, v in per.items() if v > 0}
    busiest = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:6])
    return (
        f"events {flag:<3}  {sum(per.values()):5.1f} commands/call  "
        f"{(after[1] - before[1]) / calls:6.0f} B in  {(after[2] - before[2]) / calls:6.0f} B out"
        f"  {wall_ms:7.2f} ms/call   ({busiest})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="measured calls per setting")
    parser.add_argument("--events", default="on,off,on,off", help="settings, in turn")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        for flag in args.events.split(","):
            print(measure(server.url + "/0", flag == "on", args.calls), flush=True)
    finally:
        server.close()


if __name__ == "__main__":
    main()
