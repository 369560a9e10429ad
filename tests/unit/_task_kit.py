"""Helpers for the worked-task tests: a scripted model on the fake chat endpoint and a
runtime over a task's storage. Imported as ``tests.unit._task_kit``.

The model is the loopback fake of ``tests.unit._fake_chat``: each INFER call gets the next
reply of a list (or of a function of the request), so tests can feed wrong, invented or
hostile proposals and check that code refuses them (the issue's premise: assume the
model is wrong).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ditto_worker import create_context_worker, create_ditto, create_infer_worker
from ditto_worker.memory_tasks import MemoryStorage, TaskOptions, open_memory_storage
from ditto_worker.runtime import Runtime, WorkerDefinition
from tests.unit._fake_chat import FakeChatServer, FakeConn, chunk, usage

Reply = Any
"""A reply: a dict/list (sent as its JSON) or a str (sent as is)."""


class ScriptedModel:
    """An OpenAI-compatible fake whose replies come from ``replies`` in order (the last
    one repeats), or from ``replies(body)`` when it is callable."""

    def __init__(self, replies: list[Reply] | Callable[[Any], Reply]) -> None:
        self.replies = replies
        self.bodies: list[Any] = []
        self._lock = threading.Lock()
        self.server = FakeChatServer(self._script)

    def _next(self, body: Any) -> Reply:
        with self._lock:
            self.bodies.append(body)
            count = len(self.bodies)
        if callable(self.replies):  # outside the lock: a reply may block (a stalled model)
            return self.replies(body)
        return self.replies[min(count, len(self.replies)) - 1]

    def _script(self, conn: FakeConn) -> None:
        reply = self._next(conn.seen.body)
        text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        conn.start()
        conn.event(chunk(text))
        conn.event(chunk(finish="stop"))
        conn.event(usage(5, 5))
        conn.event("[DONE]")
        conn.end()

    @property
    def calls(self) -> int:
        """INFER requests the endpoint has received."""
        return len(self.bodies)

    def __enter__(self) -> ScriptedModel:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


TASK_BACKEND_ENV = "DITTO_TEST_TASK_BACKEND"
"""Runs the task suite on another backend (issue 35 item 8): ``postgres`` (the server of
``DITTO_TEST_POSTGRES_URL``, one schema per task directory) or ``qdrant`` (local mode;
``embedding: http`` against the embedding service of ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``
when ``DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL`` is set, else the local model);
default ``sqlite``. ``scripts/test.sh`` runs the suite on each."""


def suite_backend() -> str:
    """The backend the task suite runs on (:data:`TASK_BACKEND_ENV`)."""
    return os.environ.get(TASK_BACKEND_ENV) or "sqlite"


def _storage_options(backend: str, directory: Path, given: dict[str, Any]) -> dict[str, Any]:
    """One PostgreSQL schema / Qdrant collection per task directory (a test reopening the
    directory finds its data), the database URL from the test environment."""
    if backend == "sqlite" or "namespace" in given:
        return given
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:12]
    options: dict[str, Any] = {"namespace": f"tasks_{digest}", **given}
    if backend == "postgres":
        from tests.conftest import postgres_url

        options["env"] = {**os.environ, "DITTO_WORKER_MEMORY_POSTGRES_URL": postgres_url()}
    if backend == "qdrant" and os.environ.get("DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL"):
        options["config"] = {"embedding": "http", **(given.get("config") or {})}
        _embedding_service_ready()
    return options


_READY: list[bool] = []
READY_FILE_ENV = "DITTO_TEST_EMBEDDING_READY_FILE"
"""A file that exists once the embedding service is ready (set by the script that
started it)."""
SERVICE_READY_S = 900.0
"""How long a test process waits for the embedding service's first answer: its model
loads on its first call (``scripts/task_backends.py`` starts the suite meanwhile; at load
25 on two cores the load took minutes)."""


def _embedding_service_ready() -> None:
    """Wait (once per process) until the embedding service of
    ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*`` is ready: the file :data:`READY_FILE_ENV` names
    exists (``scripts/task_backends.py`` writes it once the service answered, so its
    count of the service's calls is the tests' alone), else until it answers an embedding
    (200; a call made while its model loads answers 504 after the gateway's timeout)."""
    if _READY:
        return
    import time

    import httpx

    marker = os.environ.get(READY_FILE_ENV)
    prefix = "DITTO_WORKER_RETRIEVAL_EMBEDDING_"
    url = os.environ[prefix + "BASE_URL"].rstrip("/") + "/embeddings"
    headers = {"Authorization": f"Bearer {os.environ.get(prefix + 'API_KEY', '')}"}
    deadline = time.monotonic() + SERVICE_READY_S
    while True:
        if marker:
            detail = "no ready file"
            if Path(marker).exists():
                break
        else:
            try:
                answer = httpx.post(url, json={"input": "ready?"}, headers=headers, timeout=120)
                if answer.status_code == 200:
                    break
                detail = f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                detail = type(exc).__name__
        if time.monotonic() > deadline:
            raise RuntimeError(f"the embedding service did not answer: {detail}")
        time.sleep(0.5)
    _READY.append(True)


@contextlib.contextmanager
def task_runtime(
    directory: Path,
    model: ScriptedModel,
    backend: str | None = None,
    context: Any = None,
    context_cache: Any = None,
    wrap: Callable[[WorkerDefinition], WorkerDefinition] | None = None,
    **storage: Any,
) -> Iterator[tuple[Runtime, MemoryStorage]]:
    """An embedded runtime: MEMORY over ``open_memory_storage(backend, directory)``
    (``backend`` default: :func:`suite_backend`), CONTEXT in process (``context_cache``:
    its cache, e.g. one on a test's own clock), INFER on the scripted model; ``wrap``
    replaces each worker definition (a test's instrumented handlers)."""
    backend = backend or suite_backend()
    store = open_memory_storage(backend, directory, **_storage_options(backend, directory, storage))
    infer = create_infer_worker(
        {"baseUrl": model.server.base_url, "model": "fake"}, env={}, dotenv_path=None
    )
    workers = [*store.workers, create_context_worker(context, cache=context_cache), infer]
    runtime = create_ditto(workers=[wrap(w) for w in workers] if wrap else workers)
    try:
        yield runtime, store
    finally:
        runtime.close()
        store.close()


def options(directory: Path, **given: Any) -> TaskOptions:
    """The controller's options of a test task: tenant ``acme``, user ``alice``."""
    fields: dict[str, Any] = {
        "tenant": "acme",
        "user": "alice",
        "artifacts_dir": directory / "artifacts",
    }
    fields.update(given)
    return TaskOptions(**fields)
