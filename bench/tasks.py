"""The worked tasks' figures: wall time per task and backend, inference vs storage share,
resume cost after a kill (issue 25 item 9), and wall time per stage (issue 35).

One local model server (the packaged Qwen2.5-Coder-0.5B through llama.cpp, default
settings) serves every run, unless ``--base-url`` names an OpenAI-compatible endpoint.
Every worker definition is wrapped by a meter that times each node call by kind (INFER,
MEMORY, CONTEXT) and counts it, so a row splits the task's wall time into inference,
storage (MEMORY calls), the context cache and the rest (the loop, Graph scheduling,
checks, the artifact's fsync). Calls of one Graph may overlap (recall runs SEARCH and
CONTEXT.LOAD side by side), so shares can add up to a little over 100 %.

The model's start is timed and printed apart, before the tables (it is not in a task's
wall time).

1. **Tasks.** Per backend (a fresh SQLite file, PostgreSQL schema or Qdrant local-mode
   collection): ``write`` (a German preference), ``update`` (French), ``search``,
   ``task-state`` (three stages), in that order, as user ``alice``. Each task's wall time
   is also split per stage: the time between its progress lines (``propose``,
   ``mutate``, ``message``; ``recall``; ``1-design`` …; then ``report`` and
   ``artifact``, the frame's commit and publish).
2. **Resume after a kill.** A controller process runs the task (user ``resume``) and
   stalls right after its first checkpoint committed; it is SIGKILLed there, and the
   task is run again in this process on the same database. The row counts the INFER
   calls the killed controller completed, those of the resumed run and those of an
   uninterrupted run: ``repeated = before + resume - full`` is the inference the kill
   made the task do twice (0: none).

PostgreSQL runs when ``DITTO_TEST_POSTGRES_URL`` or ``DITTO_WORKER_MEMORY_POSTGRES_URL`` is
set (a schema of its own, dropped at the end); Qdrant runs in local mode (no server).

    python bench/tasks.py                                    # every backend, both parts
    python bench/tasks.py --backends sqlite --resume-kinds task-state
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ditto_worker import create_context_worker, create_ditto, create_infer_worker
from ditto_worker.memory_tasks import (
    TaskOptions,
    TaskOutcome,
    open_memory_storage,
    run_search,
    run_task_state,
    run_update,
    run_write,
)
from ditto_worker.runtime.definition import WorkerDefinition

GERMAN = "Please always write to me in German."
FRENCH = "From now on, always write to me in French."
RUNNERS: dict[str, Callable[..., TaskOutcome]] = {
    "write": run_write, "update": run_update, "search": run_search, "task-state": run_task_state,
}  # fmt: skip
KINDS = ("write", "update", "search", "task-state")


def request(kind: str, task_id: str) -> dict[str, Any]:
    """The bench's request of ``kind`` (write: German, update: French)."""
    said = {"write": GERMAN, "update": FRENCH}.get(kind)
    turns = [] if said is None else [
        {"role": "assistant", "content": "How should I write to you?"},
        {"role": "user", "content": said},
    ]  # fmt: skip
    return {"taskId": task_id, "kind": kind, "conversation": turns}


@dataclass
class Meter:
    """Seconds and calls per worker kind, summed over the node calls it saw."""

    seconds: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    on_call: Callable[[str], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self._lock:
            self.seconds.clear()
            self.calls.clear()

    def wrap(self, definition: WorkerDefinition) -> WorkerDefinition:
        """``definition`` with every node handler timed under its kind."""
        nodes = {node: replace(spec, handler=self._timed(definition.kind, spec.handler))
                 for node, spec in definition.nodes.items()}  # fmt: skip
        return replace(definition, nodes=nodes)

    def _timed(self, kind: str, handler: Any) -> Any:
        def timed(input: Any, ctx: Any) -> Any:
            began = time.perf_counter()
            try:
                return handler(input, ctx)
            finally:
                with self._lock:
                    self.seconds[kind] += time.perf_counter() - began
                    self.calls[kind] += 1
                if self.on_call is not None:
                    self.on_call(kind)

        return timed


@dataclass(frozen=True)
class Setup:
    """Where a backend's data lives and which model answers."""

    backend: str
    directory: Path
    namespace: str
    base_url: str
    model: str


@contextmanager
def task_runtime(setup: Setup, meter: Meter) -> Iterator[Any]:
    """An embedded runtime over ``setup``'s storage, every definition metered."""
    storage = open_memory_storage(setup.backend, setup.directory, setup.namespace)
    infer = create_infer_worker({"baseUrl": setup.base_url, "model": setup.model},
                                env={}, dotenv_path=None)  # fmt: skip
    workers = [meter.wrap(d) for d in (*storage.workers, create_context_worker(), infer)]
    try:
        with create_ditto(workers=workers) as runtime:
            yield runtime
    finally:
        storage.close()


def run_one(runtime: Any, meter: Meter, setup: Setup, kind: str, task_id: str,
            user: str) -> dict[str, Any]:  # fmt: skip
    """Runs one task; its row (wall, per-kind seconds and calls)."""
    lines: list[tuple[float, str]] = []
    opts = TaskOptions("acme", user, setup.directory / "artifacts", allow_write=True,
                       on_stage=lambda line: lines.append((time.perf_counter(), line)))  # fmt: skip
    meter.reset()
    began = time.perf_counter()
    outcome = RUNNERS[kind](runtime, {"request": request(kind, task_id)}, opts)
    wall = time.perf_counter() - began
    error = (outcome.error or {}).get("code", "")
    return {"backend": setup.backend, "task": kind, "status": f"{outcome.status} {error}".strip(),
            "wall": wall, "seconds": dict(meter.seconds), "calls": dict(meter.calls),
            "stages": stage_times(began, lines)}  # fmt: skip


def stage_times(began: float, lines: Sequence[tuple[float, str]]) -> list[tuple[str, float]]:
    """``(stage, seconds)`` per progress line: the time from the previous line (the task's
    start for the first) to it. The stage is the line's head (``propose``, ``mutate``,
    ``message``, ``1-design`` …; ``restore`` when a line says restored; ``report``,
    ``artifact`` for the frame's last steps)."""
    times: list[tuple[str, float]] = []
    previous = began
    for at, line in lines:
        head = line.split(":", 1)[0]
        times.append((f"{head} (restored)" if "restored" in line else head, at - previous))
        previous = at
    return times


def share(row: dict[str, Any], kind: str) -> str:
    seconds = row["seconds"].get(kind, 0.0)
    return f"{seconds:6.2f} s {seconds / row['wall']:5.1%}" if row["wall"] else "-"


def print_tasks(rows: Sequence[dict[str, Any]]) -> None:
    print(f"{'backend':<9}{'task':<11}{'status':<9}{'wall':>8}  {'INFER n':>7}  "
          f"{'INFER time (share)':>18}  {'MEMORY n':>8}  {'MEMORY time (share)':>19}  "
          f"{'CONTEXT':>8}  {'rest':>7}")  # fmt: skip
    for row in rows:
        rest = row["wall"] - sum(row["seconds"].values())
        print(f"{row['backend']:<9}{row['task']:<11}{row['status']:<9}{row['wall']:7.2f}s  "
              f"{row['calls'].get('INFER', 0):>7}  {share(row, 'INFER'):>18}  "
              f"{row['calls'].get('MEMORY', 0):>8}  {share(row, 'MEMORY'):>19}  "
              f"{row['seconds'].get('CONTEXT', 0.0):7.3f}s  {rest:6.3f}s")  # fmt: skip


def print_stages(rows: Sequence[dict[str, Any]]) -> None:
    print(f"{'backend':<9}{'task':<11}stage seconds (each from the previous progress line)")
    for row in rows:
        parts = "  ".join(f"{stage} {seconds:.2f}" for stage, seconds in row["stages"])
        print(f"{row['backend']:<9}{row['task']:<11}{parts}")


CHILD = "child"
"""``python bench/tasks.py child KIND BACKEND DIR NAMESPACE BASE_URL MODEL``: the killed
controller (prints ``INFER`` per completed call, ``STALL`` after its first checkpoint)."""


def child(argv: Sequence[str]) -> None:
    """The controller that is killed: runs the task, stalls after its first checkpoint."""
    kind, backend, directory, namespace, base_url, model = argv
    setup = Setup(backend, Path(directory), namespace, base_url, model)
    meter = Meter(on_call=lambda k: k == "INFER" and print("INFER", flush=True))

    def on_stage(line: str) -> None:
        if "committed" in line:
            print("STALL", flush=True)
            time.sleep(600)  # until SIGKILL

    opts = TaskOptions("acme", "resume", setup.directory / "artifacts", allow_write=True,
                       on_stage=on_stage)  # fmt: skip
    with task_runtime(setup, meter) as runtime:
        RUNNERS[kind](runtime, {"request": request(kind, f"r-{kind}")}, opts)


def killed(setup: Setup, kind: str) -> int:
    """Starts the child controller, SIGKILLs it at its stall; INFER calls it completed."""
    argv = [sys.executable, __file__, CHILD, kind, setup.backend, str(setup.directory),
            setup.namespace, setup.base_url, setup.model]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    done = 0
    try:
        for line in proc.stdout:
            done += line.strip() == "INFER"
            if line.strip() == "STALL":
                break
        else:
            raise RuntimeError(f"the controller of {kind} ended before its checkpoint")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    return done


def resume_row(setup: Setup, kind: str, full: dict[str, Any]) -> dict[str, Any]:
    """Kill, then resume ``kind`` in this process; the counts against a full run."""
    before = killed(setup, kind)
    meter = Meter()
    with task_runtime(setup, meter) as runtime:
        row = run_one(runtime, meter, setup, kind, f"r-{kind}", "resume")
    again = row["calls"].get("INFER", 0)
    expected = full["calls"].get("INFER", 0)
    return {**row, "before": before, "resumed": again, "full": expected,
            "repeated": before + again - expected, "full_wall": full["wall"]}  # fmt: skip


def print_resumes(rows: Sequence[dict[str, Any]]) -> None:
    print(f"{'backend':<9}{'task':<11}{'status':<9}{'INFER before kill':>18}"
          f"{'INFER resume':>13}{'INFER full run':>15}{'repeated':>9}"
          f"{'resume wall':>12}{'full wall':>10}")  # fmt: skip
    for r in rows:
        print(f"{r['backend']:<9}{r['task']:<11}{r['status']:<9}{r['before']:>18}"
              f"{r['resumed']:>13}{r['full']:>15}{r['repeated']:>9}"
              f"{r['wall']:>11.2f}s{r['full_wall']:>9.2f}s")  # fmt: skip


@contextmanager
def model_endpoint(base_url: str | None, model: str) -> Iterator[tuple[str, str]]:
    """``(base_url, model)``: the given endpoint, or the local model started here."""
    if base_url:
        yield base_url, model
        return
    from ditto_worker.infer.local import LocalModelServer

    began = time.perf_counter()
    with LocalModelServer.start() as server:
        print(f"local model started in {time.perf_counter() - began:.1f} s (default settings)")
        yield server.base_url, server.model


def backends(chosen: Sequence[str]) -> list[str]:
    """The backends to run: PostgreSQL only with a URL (said when left out)."""
    url = os.environ.get("DITTO_WORKER_MEMORY_POSTGRES_URL") or os.environ.get(
        "DITTO_TEST_POSTGRES_URL", ""
    )
    if "postgres" in chosen and not url:
        print("postgres left out: set DITTO_TEST_POSTGRES_URL or DITTO_WORKER_MEMORY_POSTGRES_URL")
        return [b for b in chosen if b != "postgres"]
    if url:
        os.environ["DITTO_WORKER_MEMORY_POSTGRES_URL"] = url
    os.environ.pop("DITTO_WORKER_MEMORY_QDRANT_URL", None)  # Qdrant in local mode
    return list(chosen)


def drop(setup: Setup) -> None:
    if setup.backend == "postgres":
        import psycopg

        url = os.environ["DITTO_WORKER_MEMORY_POSTGRES_URL"]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{setup.namespace}" CASCADE')


def bench_backend(setup: Setup, resume_kinds: Sequence[str]) -> tuple[list[Any], list[Any]]:
    """Part 1 (the four tasks) and part 2 (kill + resume) on one backend."""
    meter = Meter()
    with task_runtime(setup, meter) as runtime:
        rows = [run_one(runtime, meter, setup, kind, f"{kind}-1", "alice") for kind in KINDS]
        fulls = {k: run_one(runtime, meter, setup, k, f"full-{k}", "full") for k in resume_kinds}
    resumes = [resume_row(setup, kind, fulls[kind]) for kind in resume_kinds]
    return rows, resumes


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [CHILD]:
        child(args[1:])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--backends", default="sqlite,postgres,qdrant")
    parser.add_argument("--resume-kinds", default="write,task-state")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint")
    parser.add_argument("--model", default="", help="the endpoint's model name")
    parsed = parser.parse_args(args)
    resume_kinds = [k for k in parsed.resume_kinds.split(",") if k]
    print("command: python bench/tasks.py " + " ".join(args))
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} cores)")  # fmt: skip
    rows: list[Any] = []
    resumes: list[Any] = []
    with model_endpoint(parsed.base_url, parsed.model) as (base_url, model):
        for backend in backends(parsed.backends.split(",")):
            directory = Path(tempfile.mkdtemp(prefix=f"bench-tasks-{backend}-"))
            setup = Setup(backend, directory, f"bench_{uuid.uuid4().hex[:10]}", base_url, model)
            try:
                done, resumed = bench_backend(setup, resume_kinds)
            finally:
                drop(setup)
                shutil.rmtree(directory, ignore_errors=True)
            rows += done
            resumes += resumed
    print("\n1. wall time per task and backend (INFER = inference, MEMORY = storage calls)")
    print_tasks(rows)
    print("\n   per stage (the model's start is the line above the tables, not in these)")
    print_stages(rows)
    print("\n2. resume after SIGKILL of the controller at its first checkpoint")
    print_resumes(resumes)
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if any(r["repeated"] for r in resumes) else 0


if __name__ == "__main__":
    sys.exit(main())
