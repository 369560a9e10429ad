"""Services taken away in the middle of a worked task (issue 35 item 8; SPEC.md MEM-TASK-5:
"Redis, database and embedding outages fail explicitly; storage is never switched").

* **The embedding service**: Qdrant (local mode) with ``embedding: http`` against a real
  ``ditto-worker serve`` (``POST /v1/embeddings``, the retrieval worker's local model) in
  another process — the one of ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*`` when the
  environment names one, else one this module starts — reached
  through :class:`EmbeddingProxy`, a loopback HTTP proxy the test turns to answer 503 or to
  drop the connection unanswered. A ``write`` task loses the service after its proposal
  and candidate committed: the mutation fails ``EMBEDDING_UNAVAILABLE``, nothing is
  written, no artifact is published; with the service back the resume completes without
  asking the model again (one record, v1). A ``search`` whose query cannot be embedded
  fails the same way and resumes.
* **Redis under the CONTEXT cache**: a real ``redis-server`` killed (SIGKILL) after the
  search task's first Graph: the recall fails ``CONTEXT_UNAVAILABLE`` (or
  ``CONTEXT_TIMEOUT``: a legitimate end on a busy machine), nothing is committed for it;
  Redis back (empty: no persistence), the resume restores the working context from the
  database into Redis and completes.

The PostgreSQL table taken away mid-task is
``tests/unit/test_memory_tasks_acceptance.py``; the fleet's worker killed mid-mutation is
``tests/integration/test_memory_tasks_fleet.py``.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from ditto_worker import Scope
from ditto_worker.config.context import ContextWorkerSettings
from ditto_worker.memory_tasks import run_search, run_write
from ditto_worker.runtime import NodeContext, WorkerDefinition
from ditto_worker.testing.gateway import GatewayServer
from ditto_worker.testing.servers import RedisServer
from tests.conftest import EVENT_WAIT_S
from tests.unit._task_kit import options, task_runtime
from tests.unit.test_memory_tasks_preferences import GERMAN, model, proposing, request

# the module's serve warms its model for up to 600 s, counted against the first test
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ALICE = Scope("acme", "alice")
PREFIX = "DITTO_WORKER_RETRIEVAL_EMBEDDING_"
MODEL = "all-MiniLM-L6-v2"


class EmbeddingProxy:
    """A loopback HTTP proxy to an OpenAI-compatible embedding service (``upstream``, its
    ``/v1`` URL). ``mode``: ``ok`` forwards the request and its answer; ``503`` answers
    503 itself; ``drop`` reads the request and closes the connection without an answer.
    ``seen[mode]`` counts the requests each mode handled."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.mode = "ok"
        self.seen: Counter[str] = Counter()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                mode = proxy.mode
                proxy.seen[mode] += 1
                if mode == "drop":
                    self.close_connection = True
                    return  # no status line: the client sees the connection end
                if mode == "503":
                    self._answer(503, b'{"error": "the embedding service is down"}')
                    return
                path = self.path.removeprefix("/v1")
                sent = httpx.post(proxy.upstream + path, content=body, timeout=300,
                                  headers={"Authorization": self.headers.get("Authorization", ""),
                                           "Content-Type": "application/json"})  # fmt: skip
                self._answer(sent.status_code, sent.content)

            def _answer(self, status: int, content: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def embedding_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``DITTO_WORKER_RETRIEVAL_EMBEDDING_*`` of a real serve: the environment's, else a
    ``ditto-worker serve`` started here (warmed: its first call loads the model)."""
    if os.environ.get(PREFIX + "BASE_URL"):
        yield {k: v for k, v in os.environ.items() if k.startswith(PREFIX)}
        return
    folder = tmp_path_factory.mktemp("embedding-service")
    token = uuid.uuid4().hex
    (folder / "ditto.yaml").write_text(
        "workers: {infer: {local: {autoStart: false}}}\n"
        f"plugins: {{sqlite: {{path: '{folder / 'memory.sqlite'}'}}}}\n"
        f"gateway: {{tokens: [{{sha256: {_sha(token)}, tenant: embed, user: tasks}}]}}\n",
        encoding="utf-8",
    )
    with GatewayServer(folder, ready_s=EVENT_WAIT_S) as served:
        env = {f"{PREFIX}BASE_URL": f"{served.url}/v1", f"{PREFIX}MODEL": MODEL,
               f"{PREFIX}DIMENSIONS": "384", f"{PREFIX}API_KEY": token,
               f"{PREFIX}TIMEOUT_S": "120"}  # fmt: skip
        deadline, auth = time.monotonic() + 600, {"Authorization": f"Bearer {token}"}
        while True:  # a first call that outlasts its deadline answers 504 while the model loads
            answer = httpx.post(f"{served.url}/v1/embeddings", json={"input": "warm up"},
                                headers=auth, timeout=120)  # fmt: skip
            if answer.status_code == 200 or time.monotonic() > deadline:
                assert answer.status_code == 200, (answer.text, served.log())
                break
            assert answer.status_code == 504, answer.text
        yield env


@pytest.fixture
def proxy(embedding_service: dict[str, str]) -> Iterator[EmbeddingProxy]:
    served = EmbeddingProxy(embedding_service[PREFIX + "BASE_URL"])
    yield served
    served.close()


def _qdrant(tmp_path: Path, proxy: EmbeddingProxy, service: dict[str, str]) -> dict[str, Any]:
    """``task_runtime`` storage options: Qdrant local mode, ``embedding: http`` through the
    proxy (the rest of the service's settings as they are)."""
    env = {**os.environ, **service, PREFIX + "BASE_URL": proxy.url}
    namespace = f"outage_{uuid.uuid4().hex[:10]}"
    return {"namespace": namespace, "config": {"embedding": "http"}, "env": env}


def _preferences(runtime: Any) -> list[Any]:
    found = runtime.invoke("MEMORY.QUERY", {"filter": {"kind": "preference"}}, scope=ALICE)
    return list(found.output.items)


@pytest.mark.parametrize("fault", ["503", "drop"])
def test_the_embedding_service_lost_mid_write_fails_explicitly_and_the_resume_completes(
    tmp_path: Path, proxy: EmbeddingProxy, embedding_service: dict[str, str], fault: str
) -> None:
    storage = _qdrant(tmp_path, proxy, embedding_service)

    def on_stage(line: str) -> None:  # the service goes away once the proposal committed
        if line.startswith("propose: done"):
            proxy.mode = fault

    writer = options(tmp_path, allow_write=True, on_stage=on_stage)
    said = {"request": request("write", "w1", GERMAN)}
    with model(proposing(GERMAN, "de")) as fake:
        with task_runtime(tmp_path, fake, "qdrant", **storage) as (runtime, _):
            down = run_write(runtime, said, writer)
            assert down.status == "failed", down
            assert down.error is not None and down.error["code"] == "EMBEDDING_UNAVAILABLE"
            assert "127.0.0.1" not in down.error["message"]
            assert proxy.seen[fault] >= 1
            assert _preferences(runtime) == []  # nothing written without its vector
            assert not (tmp_path / "artifacts" / "w1.json").exists()
            task = runtime.invoke("MEMORY.QUERY", {}, scope=Scope.for_task("acme", "alice", "w1"))
            assert {i.key for i in task.output.items} == {"progress:propose", "candidate"}
            proxy.mode = "ok"  # the service is back: the same directory resumes
            back = run_write(runtime, said, options(tmp_path, allow_write=True))
            assert back.status == "success", back.error
            [saved] = _preferences(runtime)
            proxy.mode = fault  # a search whose query cannot be embedded
            lost = run_search(runtime, {"request": request("search", "s1")}, options(tmp_path))
            proxy.mode = "ok"
            found = run_search(runtime, {"request": request("search", "s1")}, options(tmp_path))
    assert back.artifact is not None and found.artifact is not None
    assert [p["stage"] for p in back.artifact["progress"] if p["restored"]] == ["propose"]
    assert back.artifact["mutation"]["records"][0]["id"] == saved.id
    assert saved.metadata["version"] == 1
    proposals = [b for b in fake.bodies if "proposals" in str(b.get("response_format"))]
    assert len(proposals) == 1  # the resume did not ask the model again
    assert lost.status == "failed" and lost.error is not None
    assert lost.error["code"] == "EMBEDDING_UNAVAILABLE"
    assert found.status == "success", found.error
    assert found.artifact["message"].endswith(f"(memory {saved.id} v1)")
    assert proxy.seen["ok"] >= 2  # the write's vector and the search's query went through


def _killing_after_first_get(server: RedisServer, armed: threading.Event) -> Any:
    """Wraps MEMORY.GET: once ``armed``, the first GET (the task's restore Graph) kills
    Redis after it answered, so the task loses Redis between its first Graph and recall."""

    def wrap(definition: WorkerDefinition) -> WorkerDefinition:
        if "MEMORY.GET" not in definition.nodes:
            return definition
        spec = definition.nodes["MEMORY.GET"]
        real: Callable[[Any, NodeContext], Any] = spec.handler

        def get(input: Any, ctx: NodeContext) -> Any:
            answer = real(input, ctx)
            if armed.is_set():
                armed.clear()
                server.stop()  # SIGKILL; returns once the process is gone
            return answer

        return replace(definition, nodes={**definition.nodes,
                                          "MEMORY.GET": replace(spec, handler=get)})  # fmt: skip

    return wrap


def test_redis_killed_mid_search_fails_explicitly_and_the_resume_restores_the_context(
    tmp_path: Path,
) -> None:
    with RedisServer() as server:
        armed = threading.Event()
        settings = ContextWorkerSettings(redis_url=server.url, ttl_s=600.0)
        wrap = _killing_after_first_get(server, armed)
        with model(proposing(GERMAN, "de")) as fake:
            with task_runtime(tmp_path, fake, context=settings, wrap=wrap) as (runtime, _):
                wrote = run_write(runtime, {"request": request("write", "w1", GERMAN)},
                                  options(tmp_path, allow_write=True))  # fmt: skip
                assert wrote.status == "success", wrote.error
                armed.set()
                down = run_search(runtime, {"request": request("search", "s1")},
                                  options(tmp_path))  # fmt: skip
                assert not armed.is_set()  # Redis was killed inside the task
                server.start()  # back on its port, empty
                back = run_search(runtime, {"request": request("search", "s1")},
                                  options(tmp_path))  # fmt: skip
                task = runtime.invoke("MEMORY.QUERY", {},
                                      scope=Scope.for_task("acme", "alice", "s1"))  # fmt: skip
        cached = redis.Redis.from_url(server.url).keys("*preferences*")
    assert down.status == "failed" and down.error is not None, down
    assert down.error["code"] in {"CONTEXT_UNAVAILABLE", "CONTEXT_TIMEOUT"}, down.error
    assert "127.0.0.1" not in down.error["message"]
    assert back.status == "success", back.error
    assert back.artifact is not None
    assert back.artifact["context"]["cacheHit"] is False  # Redis came back empty ...
    assert back.artifact["context"]["restored"] is True  # ... restored from the database
    assert not any(p["restored"] for p in back.artifact["progress"])  # recall never committed
    [memory] = back.artifact["memories"]
    assert back.artifact["message"].endswith(f"(memory {memory['id']} v1)")
    assert {i.key for i in task.output.items} >= {"progress:recall", "report"}
    assert cached  # the working context lives in Redis again, not in a fallback
