"""The deadline stress harness (SPEC.md MEM-RUN-6; issue 23 item 2), embedded and fleet.

Imported as ``tests.integration._deadline_kit`` by tests/integration/test_deadline_stress.py
(embedded, and a real worker on the shared Redis).
Every case is one call, one Graph run or one loop of a node of one kind, with a deadline,
a handler that takes a random time, and (half the time) an explicit cancel at a random
moment, so deadlines race handler completion and cancels. Each outcome is checked
against the rule; the counts are returned for the test to print.

The kinds and what makes them take time (each handler maps a cancelled token to its
kind's cancelled code, the race the rule is about):

* MEMORY (``MEMORY.GET``) and RETRIEVAL (``RETRIEVAL.SEARCH``): the ``slow`` store plugin
  (tests/fixtures/slow_store, found by entry point) waits ``wait-<ms>`` on the token;
* CONTEXT (``CONTEXT.LOAD`` / ``CONTEXT.UPDATE``): the real Redis cache behind
  :class:`DelayProxy`, which holds each reply chunk a random time;
* INFER (``INFER.GENERATE``): the fake chat endpoint (tests/unit/_fake_chat.py) waits the
  time the message names, then streams a reply;
* ECHO (``ECHO.SLEEP``, tests/fixtures/echo_kind, a kind found by entry point only): waits
  on its token and raises ``ECHO_CANCELLED`` when it fires.

The rule, per outcome (``D`` the deadline; an explicit cancel requested between ``c0`` and
``c1``): ``cancelled`` only when a cancel was requested before ``D`` (``c0 < D``);
``timeout`` never when a cancel was done before ``D`` and before the call returned
(``c1 < D - EARLY_S``); the codes are the kind's (``GRAPH_*`` for Graph nodes that never
started and for Graph and loop results); nothing ends ``failed``.
"""

from __future__ import annotations

import heapq
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ditto_worker import CancelToken, graph
from ditto_worker.runtime import Runtime
from tests.unit._fake_chat import FakeConn, reply_script

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLUGIN_PATHS = [str(FIXTURES / "echo_kind"), str(FIXTURES / "slow_store")]
"""Folders whose dist-info declare the ECHO kind and the ``slow`` store (``sys.path``)."""

EARLY_S = 0.005
"""A handler's own clock (a socket or HTTP timer set to the time left) may end a call a
hair before the deadline by ``time.time()``; a cancel that close to it may lose."""

CODES = {
    "MEMORY": ("MEMORY_CANCELLED", "MEMORY_TIMEOUT"),
    "RETRIEVAL": ("MEMORY_CANCELLED", "MEMORY_TIMEOUT"),
    "CONTEXT": ("CONTEXT_CANCELLED", "CONTEXT_TIMEOUT"),
    "INFER": ("INFER_CANCELLED", "INFER_TIMEOUT"),
    "ECHO": ("ECHO_CANCELLED", "ECHO_TIMEOUT"),
}
KINDS = tuple(CODES)


def node_call(kind: str, wait_ms: int, serial: int) -> tuple[str, dict[str, Any]]:
    """The node and input of one case of ``kind`` that takes about ``wait_ms``."""
    if kind == "MEMORY":
        return "MEMORY.GET", {"ids": [f"wait-{wait_ms}"]}
    if kind == "RETRIEVAL":
        return "RETRIEVAL.SEARCH", {"query": f"wait-{wait_ms}", "target": {"name": "slow"}}
    if kind == "CONTEXT":
        if serial % 3 == 0:
            item = {"id": f"i{serial % 5}", "sourceNode": "STRESS", "content": "x"}
            return "CONTEXT.UPDATE", {"name": f"c{serial % 4}", "ingress": [item], "ttlS": 60}
        return "CONTEXT.LOAD", {"name": f"c{serial % 4}"}
    if kind == "INFER":
        return "INFER.GENERATE", {"messages": [{"role": "user", "content": f"wait-{wait_ms}"}]}
    return "ECHO.SLEEP", {"seconds": wait_ms / 1000, "stopCode": True}


def stress_config(fleet: dict[str, Any], context_redis_url: str, chat_url: str,
                  concurrency: int) -> dict[str, Any]:  # fmt: skip
    """The ``ditto.yaml`` (as data) serving the five kinds over the slow store, the delayed
    Redis and the fake chat endpoint."""
    return {
        "fleet": fleet,
        "workers": {
            "memory": {"store": "slow", "concurrency": concurrency},
            "retrieval": {"targets": {"slow": {"store": "slow"}}, "concurrency": concurrency},
            "context": {"redisUrl": context_redis_url, "concurrency": concurrency},
            "infer": {"baseUrl": chat_url, "model": "fake-model", "concurrency": concurrency},
            "echo": {"concurrency": concurrency},
        },
    }


def chat_script(conn: FakeConn) -> None:
    """The fake endpoint: wait the ``wait-<ms>`` of the last message, then reply."""
    if conn.seen.body is None:  # the client went away before its body was sent
        return
    content = str(conn.seen.body["messages"][-1]["content"])
    time.sleep(int(content.removeprefix("wait-")) / 1000)
    reply_script("fine")(conn)


# --- a Redis that answers late --------------------------------------------------------------


class DelayProxy:
    """A loopback TCP proxy to ``upstream`` (host, port) that holds each reply chunk a
    random time in ``[0, max_delay_s]`` (requests pass at once, order is kept)."""

    def __init__(self, upstream: tuple[str, int], max_delay_s: float, seed: int = 7) -> None:
        self.upstream = upstream
        self.max_delay_s = max_delay_s
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self._listener.getsockname()[1]}"

    def _delay(self) -> float:
        with self._lock:
            return self._random.uniform(0, self.max_delay_s)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for source, sink, delayed in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pipe, args=(source, sink, delayed),
                                 daemon=True).start()  # fmt: skip

    def _pipe(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        try:
            while data := source.recv(65536):
                if delayed:
                    time.sleep(self._delay())
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()


# --- explicit cancels at chosen moments -----------------------------------------------------


@dataclass
class CancelMark:
    """When an explicit cancel was requested: ``c0`` before ``token.cancel()``, ``c1``
    after (``time.time()``); ``None`` when it never fired."""

    c0: float | None = None
    c1: float | None = None


class Canceller:
    """One thread cancelling tokens at their moments (no thread per call)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, CancelToken, CancelMark]] = []
        self._cv = threading.Condition()
        self._serial = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def at(self, when: float, token: CancelToken) -> CancelMark:
        mark = CancelMark()
        with self._cv:
            self._serial += 1
            heapq.heappush(self._heap, (when, self._serial, token, mark))
            self._cv.notify()
        return mark

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and (
                    not self._heap or self._heap[0][0] > time.time()
                ):  # fmt: skip
                    wait = None if not self._heap else self._heap[0][0] - time.time()
                    self._cv.wait(wait)
                if self._closed:
                    return
                _, _, token, mark = heapq.heappop(self._heap)
            mark.c0 = time.time()
            token.cancel()
            mark.c1 = time.time()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(5)


# --- cases, outcomes and the rule -----------------------------------------------------------


@dataclass(frozen=True)
class Case:
    kind: str
    mode: str  # call | graph | loop
    serial: int
    wait_ms: int
    cancel_after_s: float | None


def cases(kind: str, count: int, timeout_s: float, seed: int) -> list[Case]:
    """``count`` cases of ``kind``: 70 % single calls, 20 % Graph runs, 10 % loops; the
    handler takes 0..1.5x the timeout; half get an explicit cancel at 0..1.5x the timeout."""
    rng = random.Random(f"{seed}-{kind}")
    modes = ["call"] * 7 + ["graph"] * 2 + ["loop"]
    out = []
    for serial in range(count):
        cancel = rng.uniform(0, 1.5 * timeout_s) if rng.random() < 0.5 else None
        wait_ms = int(rng.uniform(0, 1500 * timeout_s))
        out.append(Case(kind, modes[serial % len(modes)], serial, wait_ms, cancel))
    return out


@dataclass
class Outcome:
    """One case's results: ``(level, status, code)`` per NodeResult / Graph / loop."""

    case: Case
    d_lo: float
    d_hi: float
    mark: CancelMark | None
    returned: float
    ends: list[tuple[str, str, str | None]] = field(default_factory=list)
    execution_ids: list[str] = field(default_factory=list)


def violations(outcome: Outcome) -> list[str]:
    """Every way ``outcome`` breaks MEM-RUN-6 (empty: it follows the rule)."""
    cancelled_code, timeout_code = CODES[outcome.case.kind]
    mark = outcome.mark
    c0 = mark.c0 if mark is not None else None
    c1 = mark.c1 if mark is not None else None
    cancel_requested_early = c0 is not None and c0 < outcome.d_hi
    cancel_done_early = c1 is not None and c1 < min(outcome.d_lo - EARLY_S, outcome.returned)
    found = []
    for level, status, code in outcome.ends:
        where = f"{outcome.case} {level}: {status}/{code}"
        if status == "cancelled":
            if code not in (cancelled_code, "GRAPH_CANCELLED"):
                found.append(f"{where}: not the kind's cancelled code")
            if not cancel_requested_early:
                found.append(f"{where}: cancelled without a cancel before the deadline")
        elif status == "timeout":
            if code not in (timeout_code, "GRAPH_TIMEOUT"):
                found.append(f"{where}: not the kind's timeout code")
            if cancel_done_early:
                found.append(f"{where}: timeout though cancelled before the deadline")
        elif status != "success":
            found.append(f"{where}: neither success, cancelled nor timeout")
    return found


def _code(result: Any) -> str | None:
    return result.error.code if result.error is not None else None


class Stress:
    """Runs cases on ``runtime`` (embedded or a fleet client) and checks them."""

    def __init__(self, runtime: Runtime, timeout_s: float, scope: dict[str, str]) -> None:
        self.runtime = runtime
        self.timeout_s = timeout_s
        self.scope = scope
        self.canceller = Canceller()

    def run(self, case: Case) -> Outcome:
        token = CancelToken()
        start = time.time()
        mark = None
        if case.cancel_after_s is not None:
            mark = self.canceller.at(start + case.cancel_after_s, token)
        node, input = node_call(case.kind, case.wait_ms, case.serial)
        if case.mode == "call":
            deadline = start + self.timeout_s
            result = self.runtime.invoke(node, input, deadline=deadline, cancel=token,
                                         scope=self.scope)  # fmt: skip
            return Outcome(case, deadline, deadline, mark, time.time(),
                           [("call", result.status, _code(result))],
                           [result.execution_id])  # fmt: skip
        began: list[float] = []

        def bind(_input: Any, _results: Any) -> Any:
            began.append(time.time())
            return input

        plan = graph("stress").node("n", node, [], bind)
        if case.mode == "graph":
            run = self.runtime.run(plan, None, timeout=self.timeout_s, cancel=token,
                                   scope=self.scope)  # fmt: skip
            runs, ends = [run], list[tuple[str, str, str | None]]()
        else:

            def loop_plan(_input: Any) -> Iterator[Any]:
                began.append(time.time())
                first = yield plan, None
                if first.status == "success":
                    yield plan, None

            looped = self.runtime.loop(loop_plan, None, timeout=self.timeout_s, cancel=token,
                                       scope=self.scope)  # fmt: skip
            runs, ends = list(looped.graphs), [("loop", looped.status, _code(looped))]
        returned = time.time()
        ids: list[str] = []
        for run in runs:
            ends.append((f"graph {run.run_id}", run.status, _code(run)))
            ends += [(f"node {run.run_id}", r.status, _code(r)) for r in run.results.values()]
            ids += [r.execution_id for r in run.results.values()]
        d_hi = (began[0] if began else returned) + self.timeout_s
        return Outcome(case, start + self.timeout_s, d_hi, mark, returned, ends, ids)

    def run_all(self, all_cases: list[Case], threads: int) -> list[Outcome]:
        with ThreadPoolExecutor(threads, thread_name_prefix="stress") as pool:
            return list(pool.map(self.run, all_cases))

    def close(self) -> None:
        self.canceller.close()


def tally(outcomes: list[Outcome]) -> Counter[tuple[str, str, str]]:
    """Counts of (kind, level, status); level ``call`` counts node calls (single calls
    and Graph nodes), ``graph`` / ``loop`` the runs."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for outcome in outcomes:
        for level, status, _ in outcome.ends:
            name = level.split()[0]
            counts[(outcome.case.kind, "call" if name == "node" else name, status)] += 1
    return counts


def report(counts: Counter[tuple[str, str, str]], title: str) -> str:
    """The counts as a table: kind x level, then success / cancelled / timeout / other."""
    lines = [title, f"{'kind':10} {'level':6} {'success':>8} {'cancelled':>10} {'timeout':>8} "
             f"{'other':>6} {'total':>6}"]  # fmt: skip
    for kind in KINDS:
        for level in ("call", "graph", "loop"):
            row = {s: counts[(kind, level, s)] for s in ("success", "cancelled", "timeout")}
            total = sum(n for (k, lv, _), n in counts.items() if (k, lv) == (kind, level))
            other = total - sum(row.values())
            lines.append(f"{kind:10} {level:6} {row['success']:8} {row['cancelled']:10} "
                         f"{row['timeout']:8} {other:6} {total:6}")  # fmt: skip
    return "\n".join(lines)


def new_scope() -> dict[str, str]:
    """A tenant of the run's own (its context keys are ``<tenant>:u:context:*``)."""
    return {"tenant": f"stress-{uuid.uuid4().hex[:12]}", "user": "u"}
