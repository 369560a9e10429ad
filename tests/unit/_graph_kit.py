"""Shared by the Graph tests (unit: embedded; integration: a real fleet) and bench/graph.py.

Imported as ``tests.unit._graph_kit``. Holds:

* :class:`Echo` — a test worker kind ``ECHO`` (``ECHO.SLEEP``) whose handler records each
  call (start/end on ``time.monotonic``, the ``NodeContext`` headers, deadline and whether
  it was cancelled), can meet other calls at a barrier (concurrency proven without timing),
  signal and wait on named events, wait on its cancel token, and fail with a code;
* the seed's two Graph examples (memory-worker-api.zh.txt): :func:`memory_graph`
  (``read-memory``: MEMORY.GET) and :func:`memory_to_context` (``memory-context``:
  MEMORY.SEARCH -> CONTEXT.UPDATE with the seed's status-checking bind), and
  :func:`seed_memories` to fill a store for them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ditto_worker import NodeResult, create_memory, graph, to_wire
from ditto_worker.errors import NodeError
from ditto_worker.memory.ports import MemoryStore
from ditto_worker.runtime import Graph, GraphResult, NodeContext, NodeSpec, WorkerDefinition

WAIT_S = 20.0  # longest a handler waits for a barrier or an event (a failure, not a pace)


@dataclass
class Call:
    """One ECHO.SLEEP call as its handler saw it."""

    tag: str
    start: float
    end: float = 0.0
    headers: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None
    cancelled: bool = False
    operation_id: str | None = None


class Echo:
    """The ECHO test kind. Input keys (all optional): ``tag``; ``sleepS`` (wait on the
    cancel token that long); ``barrier`` (meet the other barrier calls first); ``set`` /
    ``wait`` (name of an event to set at start / to wait for); ``waitCancel`` (wait until
    cancelled, at most WAIT_S); ``fail`` (raise NodeError with that code)."""

    def __init__(self, concurrency: int = 10, barrier_parties: int = 10) -> None:
        self.concurrency = concurrency
        self.barrier = threading.Barrier(barrier_parties)
        self.calls: list[Call] = []
        self.entered = threading.Semaphore(0)
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, name: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(name, threading.Event())

    def definition(self) -> WorkerDefinition:
        return WorkerDefinition.of(
            "ECHO", [NodeSpec("ECHO.SLEEP", self.sleep)], concurrency=self.concurrency
        )

    def sleep(self, input: Any, ctx: NodeContext) -> dict[str, Any]:
        input = input if isinstance(input, dict) else {}
        call = Call(str(input.get("tag", "")), time.monotonic(), headers=dict(ctx.headers),
                    deadline=ctx.deadline, operation_id=ctx.operation_id)  # fmt: skip
        with self._lock:
            self.calls.append(call)
        self.entered.release()
        if input.get("set"):
            self.event(input["set"]).set()
        if input.get("barrier"):
            self.barrier.wait(WAIT_S)
        if input.get("wait"):
            self.event(input["wait"]).wait(WAIT_S)
        if input.get("waitCancel"):
            ctx.cancel.wait(WAIT_S)
        if input.get("sleepS"):
            ctx.cancel.wait(float(input["sleepS"]))
        call.cancelled = ctx.cancel.cancelled
        call.end = time.monotonic()
        if input.get("fail"):
            raise NodeError(str(input["fail"]), "asked to fail")
        return {"tag": call.tag, "seen": sorted(ctx.headers)}

    def by_tag(self) -> dict[str, Call]:
        with self._lock:
            return {c.tag: c for c in self.calls}


# --- the seed's examples ----------------------------------------------------------------


def memory_graph() -> Graph:
    """The seed's ``memoryGraph``: ``graph("read-memory").node("memory", "MEMORY.GET", [],
    id => ({ ids: [id] }))``, run with ``"m1"``'s real id."""
    return graph("read-memory").node("memory", "MEMORY.GET", [], lambda id: {"ids": [id]})


def search_to_context(_query: Any, results: Mapping[str, NodeResult[Any]]) -> dict[str, Any]:
    """The seed's bind of ``context``: check ``search``'s status, then map each hit to a
    context item (non-string content as JSON text; relevance only when scored)."""
    search = results["search"]
    if search.status != "success" or search.output is None:
        code = search.error.code if search.error is not None else search.status
        raise NodeError(code, "the search did not succeed")
    ingress = []
    for hit in search.output:
        memory = hit.memory
        content = memory.content if isinstance(memory.content, str) else json.dumps(memory.content)
        metadata: dict[str, Any] = {"memoryId": memory.id}
        if hit.score is not None:
            metadata["relevance"] = hit.score
        ingress.append({"id": f"memory:{memory.id}", "sourceNode": "MEMORY.SEARCH",
                        "content": content, "metadata": metadata})  # fmt: skip
    return {"context": {"items": []}, "ingress": ingress}


def memory_to_context() -> Graph:
    """The seed's ``memoryToContext`` Graph (run with ``"language preference"``)."""
    return (
        graph("memory-context")
        .node("search", "MEMORY.SEARCH", [], lambda query: {"query": query, "limit": 5})
        .node("context", "CONTEXT.UPDATE", ["search"], search_to_context)
    )


def seed_memories(store: MemoryStore) -> list[str]:
    """Write the memories the examples read; returns their ids in order."""
    result = create_memory(store).write(
        {
            "memories": [
                {"key": "preference", "content": {"language": "zh-CN"},
                 "metadata": {"kind": "preference"}},
                {"content": "The user's language preference is Chinese (zh-CN)."},
                {"content": "Prefers short replies; language preference: concise."},
                {"content": "Unrelated note about the database schema."},
            ]
        }
    )  # fmt: skip
    assert result.status == "success" and result.output is not None
    return [item.id for item in result.output]


def comparable(result: GraphResult) -> dict[str, Any]:
    """The wire form of a Graph result without the ids that differ per run."""
    wire = to_wire(result)
    wire.pop("runId")
    for node in wire["results"].values():
        node.pop("executionId")
    return wire
