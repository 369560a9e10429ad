"""The worked tasks on every backend (issue 25 items 3 and 7): write -> update -> search on
SQLite, PostgreSQL (the real server) and Qdrant (local mode, real local embeddings:
no Qdrant server can run here, so this is labelled local mode). The model is the
scripted fake endpoint; real generation is tests/integration/test_memory_tasks_model.py.

Checks per backend: the preference is written once, revised in place (same id, version
2), recalled by the next task with the task's ``kind=preference`` filter and cited; the
checkpoints stay in the task space; on Qdrant the update regenerated the vector (vector
SEARCH for the new value ranks it higher than before) and checkpoints carry no vector.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import Scope
from ditto_worker.memory_tasks import run_search, run_update, run_write
from tests.conftest import missing_service, postgres_url
from tests.unit._task_kit import ScriptedModel, options, task_runtime
from tests.unit.test_memory_tasks_preferences import FRENCH, GERMAN, model, proposing, request

ALICE = Scope("acme", "alice")


@pytest.fixture(params=["sqlite", "postgres", "qdrant"])
def backend(request: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    name = request.param
    namespace = f"tasks_{uuid.uuid4().hex[:10]}"
    if name == "postgres":
        monkeypatch.setenv("DITTO_WORKER_MEMORY_POSTGRES_URL", postgres_url())
    if name == "qdrant":
        monkeypatch.delenv("DITTO_WORKER_MEMORY_QDRANT_URL", raising=False)
    yield name, namespace
    if name == "postgres":
        import psycopg

        with psycopg.connect(postgres_url(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{namespace}" CASCADE')


def _vector_score(runtime: Any, text: str) -> float:
    query = {"query": text, "strategy": "vector", "filter": {"kind": "preference"}, "limit": 1}
    [hit] = runtime.invoke("MEMORY.SEARCH", query, scope=ALICE).output
    return float(hit.score)


@pytest.mark.integration
def test_write_update_search_on_each_backend(tmp_path: Path, backend: tuple[str, str]) -> None:
    name, namespace = backend
    writer = options(tmp_path, allow_write=True)
    with model(proposing(GERMAN, "de"), None) as fake:
        with task_runtime(tmp_path, fake, name, namespace=namespace) as (runtime, _):
            wrote = run_write(runtime, {"request": request("write", "w1", GERMAN)}, writer)
            assert wrote.status == "success", wrote.error
            if name == "qdrant":
                before = _vector_score(runtime, "French")
    with model(proposing(FRENCH, "fr"), None) as fake:
        with task_runtime(tmp_path, fake, name, namespace=namespace) as (runtime, _):
            revised = run_update(runtime, {"request": request("update", "u1", FRENCH)}, writer)
            assert revised.status == "success", revised.error
            found = run_search(runtime, {"request": request("search", "s1")}, options(tmp_path))
            assert found.status == "success", found.error
            items = runtime.invoke("MEMORY.QUERY", {}, scope=ALICE).output.items
            task = runtime.invoke("MEMORY.QUERY", {}, scope=Scope.for_task("acme", "alice", "u1"))
            if name == "qdrant":
                after = _vector_score(runtime, "French")
    assert [(i.key, i.metadata["version"], i.metadata["value"]) for i in items] == [
        ("preference:language", 2, "fr"),
    ]  # fmt: skip
    assert wrote.artifact and revised.artifact and found.artifact
    assert revised.artifact["mutation"]["records"][0]["id"] == items[0].id
    assert found.artifact["applied"]["language"] == "fr"
    assert found.artifact["message"].endswith(f"(memory {items[0].id} v2)")
    assert {i.metadata["kind"] for i in task.output.items} == {"checkpoint", "candidate", "report"}
    if name == "qdrant":
        assert after > before  # the vector was regenerated with the content


class _Corrupting:
    """The real local embedder whose answers are corrupted *after* the real response: one
    dimension short (``dims``), or its identity renamed (``identity``)."""

    def __init__(self, real: Any, fault: str) -> None:
        self.real, self.fault = real, fault

    @property
    def identity(self) -> Any:
        real = self.real.identity
        if self.fault == "identity":
            return type(real)(**{**real.__dict__, "model": real.model + "-other"})
        return real

    def embed(self, texts: Any) -> list[list[float]]:
        vectors: list[list[float]] = self.real.embed(texts)
        return [v[:-1] for v in vectors] if self.fault == "dims" else vectors


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["dims", "identity"])
def test_qdrant_embedding_faults_fail_explicitly_then_recover(tmp_path: Path, fault: str) -> None:
    # the seed: "Dimension corruption is injected after a real embedding response"; a
    # collection fixes the embedding identity (MEM-TASK-6): both fail, nothing is written,
    # and the original setup serves again afterwards
    from ditto_plugin_qdrant import QdrantMemoryStore
    from ditto_worker import (
        create_context_worker,
        create_ditto,
        create_infer_worker,
        create_memory_worker,
    )
    from ditto_worker.runtime.registry import build_embedder

    namespace = f"tasks_{uuid.uuid4().hex[:10]}"
    writer = options(tmp_path, allow_write=True)
    with model(proposing(GERMAN, "de"), None) as fake:
        with task_runtime(tmp_path, fake, "qdrant", namespace=namespace) as (runtime, _):
            assert run_write(runtime, {"request": request("write", "w1", GERMAN)},
                             writer).status == "success"  # fmt: skip
        embedder = _Corrupting(build_embedder("local"), fault)
        store = QdrantMemoryStore(path=str(tmp_path / "qdrant"), collection=namespace,
                                  embedder=embedder, embed_kinds=["preference"])  # fmt: skip
        infer = create_infer_worker({"baseUrl": fake.server.base_url}, env={}, dotenv_path=None)
        workers = [create_memory_worker(store, require_scope=True), create_context_worker(), infer]
        try:
            with create_ditto(workers=workers) as runtime:
                broken = run_search(
                    runtime, {"request": request("search", "s1")}, options(tmp_path)
                )
        finally:
            store.close()
        assert broken.status == "failed"
        assert broken.error is not None and broken.error["code"] == "EMBEDDING_MISMATCH"
        with task_runtime(tmp_path, fake, "qdrant", namespace=namespace) as (runtime, _):
            found = run_search(runtime, {"request": request("search", "s2")}, options(tmp_path))
            items = runtime.invoke("MEMORY.QUERY", {}, scope=ALICE).output.items
    assert found.status == "success", found.error
    assert [i.metadata["version"] for i in items] == [1]


@pytest.mark.integration
def test_qdrant_answering_503_fails_explicitly_and_the_task_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the seed's "Qdrant HTTP 503 proxy": the plugin's REST test double (no Qdrant server
    # runs here) answers 503; the task fails with the store's code, then resumes against
    # the same collection without repeating a committed stage
    import sys

    from ditto_worker.memory_tasks import run_task_state
    from tests.unit.test_memory_task_state import notes
    from tests.unit.test_memory_task_state import request as task_request

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "qdrant" / "tests"))
    from rest_double import RestDouble

    double = RestDouble()
    monkeypatch.setenv("DITTO_WORKER_MEMORY_QDRANT_URL", double.start())
    try:
        with ScriptedModel(notes) as fake, task_runtime(tmp_path, fake, "qdrant") as (rt, _):
            first = run_task_state(rt, {"request": task_request()},
                                   options(tmp_path, stop_after_checkpoint=True))  # fmt: skip
            assert first.status == "checkpointed", first.error
            double.mode = "503"
            down = run_task_state(rt, {"request": task_request()}, options(tmp_path))
            assert down.status == "failed"
            assert down.error is not None and down.error["code"] == "MEMORY_BACKEND_ERROR"
            assert "127.0.0.1" not in down.error["message"]
            double.mode = "ok"
            back = run_task_state(rt, {"request": task_request()}, options(tmp_path))
            assert back.status == "success", back.error
            assert fake.calls == 3
    finally:
        double.close()


@pytest.mark.integration
def test_the_working_context_on_real_redis_expires_and_is_restored(tmp_path: Path) -> None:
    # MEM-TASK-5 on the real cache: a hit within the TTL, a miss after it restored from the
    # database (the user is unique to this test: keys never meet another test's)
    import time

    from ditto_worker.config.context import ContextWorkerSettings

    url = os.environ.get("DITTO_TEST_REDIS_URL", "")
    if not url:
        missing_service("DITTO_TEST_REDIS_URL is not set")
    user = f"alice-{uuid.uuid4().hex[:8]}"
    settings = ContextWorkerSettings(redis_url=url, ttl_s=1.0)
    with model(proposing(GERMAN, "de"), None) as fake:
        with task_runtime(tmp_path, fake, context=settings) as (runtime, _):
            run_write(runtime, {"request": request("write", "w1", GERMAN)},
                      options(tmp_path, user=user, allow_write=True))  # fmt: skip
            runs = []
            for n, pause in enumerate([0.0, 0.0, 1.5]):
                time.sleep(pause)
                runs.append(run_search(runtime, {"request": request("search", f"s{n}")},
                                       options(tmp_path, user=user)))  # fmt: skip
    contexts = [(r.artifact["context"]["cacheHit"], r.artifact["context"]["restored"])
                for r in runs if r.artifact]  # fmt: skip
    assert contexts == [(False, True), (True, False), (False, True)]
