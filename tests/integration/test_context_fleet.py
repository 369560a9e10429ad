"""The CONTEXT worker on the fleet: real ``ditto-worker worker`` processes on real Redis
(SPEC.md MEM-CTX, MEM-RT-2; issue 15).

Two worker processes, as an operator starts them: ``ditto-worker worker --nodes memory``
(SQLite in a folder of its own) and ``ditto-worker worker --nodes context`` with no pool
or concurrency option (the kind's own: threads, 8), its cache on another database of the
same Redis (``DITTO_WORKER_CONTEXT_REDIS_URL``). Cases:

* the context worker connected to its cache before any call (the definition's ``open``
  hook) and ``ditto-worker status`` lists both CONTEXT queues with it;
* the seed's ``memoryToContext`` flow done by hand (memory-worker-api "与 Graph / Context
  的边界"): MEMORY.SEARCH, check its status, then CONTEXT.UPDATE with the seed's exact
  ingress mapping — pure mode, then cache mode ("缓存模式可把 UPDATE 的 context 换成
  scope");
* cache mode through the fleet: the scope travels as the ``ditto_scope`` header (per call,
  or bound by ``create_ditto(scope=)``) and the context lives at
  ``<tenant>:<user>:context:<name>``; another scope sees nothing, no scope is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_worker import create_ditto
from ditto_worker.config import load_runtime_config
from ditto_worker.context import ContextCacheUpdateOutput, ContextLoadOutput, ContextUpdateOutput
from ditto_worker.context.redis_cache import LOAD_SCRIPT, UPDATE_SCRIPT
from ditto_worker.contracts import MemorySearchResult, NodeResult
from ditto_worker.errors import ErrorCode
from ditto_worker.runtime import Runtime
from tests.integration._procs import WorkerProc

pytestmark = pytest.mark.integration

BROKER_DB, CACHE_DB = 5, 6  # this module's own databases of the test Redis
SCOPE = {"tenant": "acme", "user": "ada:lovelace"}  # ':' in a part: encoded in the key
KEY_PREFIX = "acme:ada%3Alovelace:context:"


@dataclass
class Fleet:
    broker_url: str
    cache: redis.Redis
    runtime: Runtime
    memory: WorkerProc
    context: WorkerProc
    folder: Path


@pytest.fixture(scope="module")
def fleet(redis_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    broker_url = f"{redis_server_url}/{BROKER_DB}"
    cache_url = f"{redis_server_url}/{CACHE_DB}"
    broker, cache = redis.Redis.from_url(broker_url), redis.Redis.from_url(cache_url)
    broker.flushdb()
    cache.flushdb()
    folder = tmp_path_factory.mktemp("context-fleet")
    env = {
        "DITTO_BROKER_URL": broker_url,
        "DITTO_RESULT_BACKEND": "",
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "memory.sqlite"),
        "DITTO_WORKER_CONTEXT_REDIS_URL": cache_url,
    }
    pid = os.getpid()
    memory_args = ["--nodes", "memory", "--pool", "threads", "--concurrency", "2",
                   "--hostname", f"memory-{pid}@localhost"]  # fmt: skip
    memory = WorkerProc(folder, memory_args, env, "memory")
    context_args = ["--nodes", "context", "--hostname", f"context-{pid}@localhost"]
    context = WorkerProc(folder, context_args, env, "context")  # the kind's own pool
    runtime = create_ditto(config=load_runtime_config({"fleet": {"brokerUrl": broker_url}}, env={}))
    try:
        memory.wait_ready()
        context.wait_ready()
        yield Fleet(broker_url, cache, runtime, memory, context, folder)
    finally:
        runtime.close()
        memory.stop()
        context.stop()
        broker.flushdb()
        cache.flushdb()
        broker.close()
        cache.close()


def _cache_clients(cache: redis.Redis) -> list[dict[str, Any]]:
    """Connections to the cache database other than ``cache``'s own."""
    own = cache.client_id()
    return [c for c in cache.client_list() if int(c["db"]) == CACHE_DB and int(c["id"]) != own]


def test_the_worker_opened_its_cache_at_start_and_status_lists_its_queues(fleet: Fleet) -> None:
    # before any CONTEXT call: the open hook connected and loaded both scripts
    assert fleet.cache.dbsize() == 0
    assert len(_cache_clients(fleet.cache)) == 1
    shas = [fleet.cache.script_load(s) for s in (UPDATE_SCRIPT, LOAD_SCRIPT)]
    assert fleet.cache.script_exists(*shas) == [True, True]

    out = subprocess.run(
        [sys.executable, "-m", "ditto_worker", "status", "--json", "--timeout", "5",
         "--broker", fleet.broker_url],
        cwd=fleet.folder, env={**os.environ, "DITTO_BROKER_URL": ""},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {row["node"]: row for row in map(json.loads, out.stdout.splitlines())}
    for node, queue in [("CONTEXT.UPDATE", "context.update"), ("CONTEXT.LOAD", "context.load")]:
        # one worker, its kind's own pool size (workers.context.concurrency: 8)
        assert rows[node] == {"node": node, "queue": queue, "backlog": 0, "workers": 1,
                              "processes": 8}  # fmt: skip
    assert rows["MEMORY.SEARCH"]["workers"] == 1 and rows["MEMORY.SEARCH"]["processes"] == 2
    assert rows["INFER.GENERATE"]["workers"] == 0  # no infer worker in this fleet


def _seed_ingress(search: NodeResult[Any]) -> list[dict[str, Any]]:
    """The seed's memoryToContext bind, line by line (memory-worker-api.zh.txt)::

    if (search.status !== "success" || !search.output) throw new Error(...);
    ingress: search.output.map(hit => ({
      id: `memory:${hit.memory.id}`, sourceNode: "MEMORY.SEARCH" as const,
      content: typeof hit.memory.content === "string" ? hit.memory.content
                                                      : JSON.stringify(hit.memory.content),
      metadata: { memoryId: hit.memory.id,
                  ...(hit.score === undefined ? {} : { relevance: hit.score }) },
    }))
    """
    if search.status != "success" or search.output is None:
        raise AssertionError(search.error.code if search.error else search.status)
    ingress = []
    for hit in search.output:
        assert isinstance(hit, MemorySearchResult)  # the client parsed the output
        content = hit.memory.content
        text = content if isinstance(content, str) else _json_stringify(content)
        metadata: dict[str, Any] = {"memoryId": hit.memory.id}
        if hit.score is not None:
            metadata["relevance"] = hit.score
        ingress.append({"id": f"memory:{hit.memory.id}", "sourceNode": "MEMORY.SEARCH",
                        "content": text, "metadata": metadata})  # fmt: skip
    return ingress


def _json_stringify(value: Any) -> str:
    """JavaScript's ``JSON.stringify``: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _write_memories(runtime: Runtime) -> list[str]:
    write = runtime.invoke("MEMORY.WRITE", {"memories": [
        {"key": "preference", "content": {"language": "zh-CN", "style": "简洁"},
         "metadata": {"kind": "preference"}},
        {"content": "The user's preferred language for answers is German."},
        {"content": "Booked a table for two on Friday."},
    ]}, timeout=30, scope=SCOPE)  # fmt: skip
    assert write.status == "success", write.error
    return [m.id for m in write.output]


def test_memory_to_context_by_hand_through_the_fleet(fleet: Fleet) -> None:  # MEM-CTX-1/2
    ids = _write_memories(fleet.runtime)

    # 1. MEMORY.SEARCH, as the seed's "search" node: {query, limit: 5}
    search = fleet.runtime.invoke(
        "MEMORY.SEARCH", {"query": "language preference", "limit": 5}, timeout=30, scope=SCOPE
    )
    # 2. check status before using output, then the seed's mapping
    ingress = _seed_ingress(search)
    assert {item["metadata"]["memoryId"] for item in ingress} == set(ids[:2])  # not Friday
    by_id = {item["id"]: item for item in ingress}
    assert by_id[f"memory:{ids[0]}"]["content"] == '{"language":"zh-CN","style":"简洁"}'
    assert by_id[f"memory:{ids[1]}"]["content"].startswith("The user's preferred language")
    assert all(isinstance(item["metadata"].get("relevance"), float) for item in ingress)

    # 3. CONTEXT.UPDATE, pure mode exactly as the seed: {context: {items: []}, ingress}
    pure = fleet.runtime.invoke(
        "CONTEXT.UPDATE", {"context": {"items": []}, "ingress": ingress}, timeout=30
    )
    assert pure.status == "success", pure.error
    assert isinstance(pure.output, ContextUpdateOutput)
    assert [i.model_dump(by_alias=True, exclude_none=True) for i in pure.output.items] == ingress
    assert fleet.cache.dbsize() == 0  # pure mode stores nothing

    # 4. cache mode: the same ingress, `context` replaced by a name under the call's scope
    cached = fleet.runtime.invoke(
        "CONTEXT.UPDATE", {"name": "memory-context", "ingress": ingress}, timeout=30, scope=SCOPE
    )
    assert cached.status == "success", cached.error
    assert isinstance(cached.output, ContextCacheUpdateOutput) and cached.output.version == 1
    dumped = [i.model_dump(by_alias=True, exclude_none=True) for i in cached.output.items]
    assert dumped == ingress
    assert [k.decode() for k in fleet.cache.keys("*")] == [KEY_PREFIX + "memory-context"]
    assert 0 < fleet.cache.ttl(KEY_PREFIX + "memory-context") <= 3600  # workers.context.ttlS

    # a later search's hits replace the same ids in place (the memory was updated)
    update = fleet.runtime.invoke("MEMORY.UPDATE", {"memories": [
        {"id": ids[1], "content": "The user's preferred language for answers is French."}
    ]}, timeout=30, scope=SCOPE)  # fmt: skip
    assert update.status == "success", update.error
    again = _seed_ingress(
        fleet.runtime.invoke(
            "MEMORY.SEARCH", {"query": "language French", "limit": 5}, timeout=30, scope=SCOPE
        )  # fmt: skip
    )
    second = fleet.runtime.invoke(
        "CONTEXT.UPDATE", {"name": "memory-context", "ingress": again}, timeout=30, scope=SCOPE
    )
    assert second.status == "success" and second.output.version == 2, second.error
    loaded = fleet.runtime.invoke("CONTEXT.LOAD", {"name": "memory-context"}, timeout=30,
                                  scope=SCOPE)  # fmt: skip
    assert loaded.status == "success" and isinstance(loaded.output, ContextLoadOutput)
    assert (loaded.output.found, loaded.output.version) == (True, 2)
    assert [i.id for i in loaded.output.items] == [item["id"] for item in ingress]  # in place
    french = {i.id: i.content for i in loaded.output.items}[f"memory:{ids[1]}"]
    assert french.endswith("French.")


def test_cache_mode_scope_comes_from_the_header_only(fleet: Fleet) -> None:  # MEM-CTX-2
    item = {"id": "a", "sourceNode": "MEMORY.SEARCH", "content": "x"}
    # bound by the runtime: every call carries the ditto_scope header
    bound = create_ditto(
        config=load_runtime_config({"fleet": {"brokerUrl": fleet.broker_url}}, env={}),
        scope={"tenant": "beta", "user": "u1"},
    )
    try:
        put = bound.invoke("CONTEXT.UPDATE", {"name": "plan", "ingress": [item]}, timeout=30)
        assert put.status == "success" and put.output.version == 1, put.error
        assert fleet.cache.exists("beta:u1:context:plan") == 1
        # a name that looks like another scope's key is only a name under this scope
        sneaky = bound.invoke("CONTEXT.UPDATE", {"name": "x:context:plan", "ingress": [item]},
                              timeout=30)  # fmt: skip
        assert sneaky.status == "success"
        assert fleet.cache.exists("beta:u1:context:x%3Acontext%3Aplan") == 1
    finally:
        bound.close()
    other = fleet.runtime.invoke("CONTEXT.LOAD", {"name": "plan"}, timeout=30,
                                 scope={"tenant": "beta", "user": "u2"})  # fmt: skip
    assert other.status == "success" and other.output.found is False
    unscoped = fleet.runtime.invoke("CONTEXT.LOAD", {"name": "plan"}, timeout=30)
    assert unscoped.status == "failed" and unscoped.error is not None
    assert unscoped.error.code == ErrorCode.PERMISSION_DENIED
    # the input cannot name a scope
    forged = fleet.runtime.invoke(
        "CONTEXT.LOAD", {"name": "plan", "scope": {"tenant": "beta", "user": "u1"}}, timeout=30
    )
    assert forged.status == "failed" and forged.error is not None
    assert forged.error.code in (ErrorCode.PERMISSION_DENIED, ErrorCode.INVALID_INPUT)
