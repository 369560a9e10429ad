"""The ``ditto.yaml`` sections of the worker kinds and graphs: ``workers.memory``,
``workers.retrieval``, ``graph`` (and the base every typed section shares).

Every section is typed, frozen and camelCase in the file; unknown keys are errors; the
models build on first load, not at import (``defer_build``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ditto_worker.contracts import NODE_IDS, Limit

__all__ = [
    "GraphSettings",
    "MemoryWorkerSettings",
    "NodeGroup",
    "RetrievalTargetSettings",
    "RetrievalWorkerSettings",
    "ScopeSettings",
    "Section",
]


class Section(BaseModel):
    """The base of a typed section: unknown keys rejected, frozen, camelCase aliases."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        defer_build=True,  # built when a config is first loaded, not at import
    )


class NodeGroup(Section):
    """A queue group served by one Celery worker process tree (one pool, one concurrency)."""

    nodes: list[str] = Field(description="Node ids of the group, e.g. [MEMORY.GET, MEMORY.QUERY].")
    concurrency: int = Field(ge=1, description="Pool size for this group's worker.")
    pool: Literal["prefork", "threads", "solo"] | None = Field(
        default=None,
        description="Celery pool of this group's worker. null: the kind's pool, except that "
        "a group of MEMORY mutations on a store with one writer (SQLite) runs on one thread "
        "(threads, concurrency 1): the store takes one write at a time anyway, and a prefork "
        "pool process only adds the hand-over of each batch (docs/fleet.md).",
    )


def _default_groups() -> dict[str, NodeGroup]:
    return {
        "reads": NodeGroup(nodes=["MEMORY.GET", "MEMORY.QUERY"], concurrency=4),
        "writes": NodeGroup(
            nodes=["MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"], concurrency=2
        ),
        "search": NodeGroup(nodes=["MEMORY.SEARCH"], concurrency=2),
    }


class ScopeSettings(Section):
    """``workers.memory.scope:`` — a trusted tenant scope (:mod:`ditto_worker.scope`)."""

    tenant: str = Field(min_length=1, max_length=256, description="Tenant id.")
    user: str = Field(min_length=1, max_length=256, description="User id within the tenant.")
    space: str = Field(
        default="memory",
        description="Space of calls that send no scope: 'memory' (long-term memories) or "
        "'task:<taskId>' (one task's checkpoints). A call's own scope may name any space of "
        "this tenant and user (MEM-TASK-2).",
    )


class MemoryWorkerSettings(Section):
    """``workers.memory:`` — the MEMORY worker (seed: ``workers.memory.queryLimit`` …)."""

    query_limit: Limit = Field(default=100, description="Runtime default QUERY limit (MEM-CONF-2).")
    search_limit: Limit = Field(
        default=10, description="Runtime default SEARCH limit (MEM-CONF-2)."
    )
    store: str = Field(
        default="sqlite", description="Store plugin name (entry point group ditto_worker.stores)."
    )
    concurrency: int = Field(default=4, ge=1, description="Pool size when no group matches.")
    pool: Literal["prefork", "threads", "solo"] = Field(
        default="prefork", description="Celery pool of `ditto-worker worker`."
    )
    groups: dict[str, NodeGroup] = Field(
        default_factory=_default_groups, description="Named queue groups (--nodes NAME)."
    )
    search_target: str = Field(
        default="",
        description="Empty: MEMORY.SEARCH uses the store's native search. A target name: "
        "MEMORY.SEARCH delegates to RETRIEVAL.SEARCH on that target (MEM-RET-2).",
    )
    scope: ScopeSettings | None = Field(
        default=None,
        description="Bind the worker to one tenant scope {tenant, user}: every call runs in "
        "it; a call whose trusted header names another is PERMISSION_DENIED.",
    )
    require_scope: bool = Field(
        default=False, description="Refuse calls without a scope (PERMISSION_DENIED)."
    )
    state_db: str = Field(
        default="",
        description="Celery worker state file (--statedb): revoked task ids survive a "
        "restart. %n is the node name; empty: revokes are kept in memory only.",
    )

    def model_post_init(self, __context: Any) -> None:
        for name, group in self.groups.items():
            unknown = [n for n in group.nodes if n not in NODE_IDS]
            if unknown:
                raise ValueError(f"group {name!r} names unknown nodes {unknown}")


class RetrievalTargetSettings(Section):
    """``workers.retrieval.targets.<name>`` — one search pipeline RETRIEVAL.SEARCH serves."""

    store: str = Field(
        default="sqlite",
        description="Store plugin holding the memories (its settings: plugins.<store>).",
    )
    pipeline: dict[str, Any] = Field(
        default_factory=dict,
        description="Pipeline settings (strategy, fusion, rerank, embedding), passed to "
        "ditto_worker.retrieval; empty: the store's native search.",
    )


class RetrievalWorkerSettings(Section):
    """``workers.retrieval:`` — the RETRIEVAL worker on the ``retrieval.search`` queue."""

    concurrency: int = Field(
        default=32,
        ge=1,
        description="Pool size of the retrieval worker; with threads, how many calls it holds "
        "at once, all sharing the model's next batch (calls beyond it wait in the broker, "
        "unbatched).",
    )
    pool: Literal["prefork", "threads", "solo"] = Field(
        default="threads",
        description="Celery pool; threads let concurrent queries share one model (micro-batching).",
    )
    search_limit: Limit = Field(default=10, description="Runtime default SEARCH limit.")
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$",
        description="Torch device of every local embedding model this process builds (the "
        "stores' embedders and the retrieval pipelines): cpu, cuda, cuda:N, or auto (cuda "
        "when one is available, else cpu); env DITTO_WORKER_RETRIEVAL_DEVICE.",
    )
    torch_threads: int = Field(
        default=0,
        ge=0,
        description="Torch CPU threads (torch.set_num_threads, one setting per process) "
        "when a local embedding model loads on the cpu: 0 = half the cores this process "
        "may use, at least 1 (1 on 2 cores); env DITTO_WORKER_RETRIEVAL_TORCH_THREADS. "
        "Torch's threads wait for each other at every operation: on a shared machine a "
        "descheduled one stalls the rest (issue 28: one query 0.9-1.8 s with 2 threads, "
        "0.1 s with 1, on 2 cores under load).",
    )
    embedder: str = Field(
        default="local",
        description="The embedder RETRIEVAL.EMBED (POST /v1/embeddings on serve) lends: an "
        "embedding provider entry point (local: all-MiniLM-L6-v2 on this device; http), "
        "built on its first call; none: no RETRIEVAL.EMBED node.",
    )
    targets: dict[str, RetrievalTargetSettings] = Field(
        default_factory=lambda: {"memories": RetrievalTargetSettings()},
        description="Target name -> pipeline; RemoteRetrievalSearchProvider(target={name}).",
    )
    state_db: str = Field(
        default="", description="Celery worker state file (--statedb), as workers.memory."
    )


class GraphSettings(Section):
    """``graph:`` — Graph and Loop defaults (SPEC.md MEM-GRAPH)."""

    loop_budget: int = Field(
        default=1024,
        ge=1,
        description="Graphs one runtime.loop() may run, sub-plans, recovery and repeated "
        "stages included (the seed's 1024-Graph budget); past it GRAPH_BUDGET_EXHAUSTED.",
    )
