"""Run the worked-task suite on PostgreSQL and Qdrant as on SQLite (issue 35 item 8).

``scripts/test.sh`` runs it after the main pytest run. The suite is the task tests under
``tests/unit`` that open a store (the scripted model endpoint; ``tests/unit/_task_kit.py``
picks the backend from ``DITTO_TEST_TASK_BACKEND``):

* ``postgres`` — the server of ``DITTO_TEST_POSTGRES_URL``, one schema per task directory;
* ``qdrant`` — local mode, with ``embedding: http`` against a real HTTP embedding service
  in another process: a ``ditto-worker serve`` started here on a free loopback port, whose
  ``POST /v1/embeddings`` is backed by its retrieval worker's model (all-MiniLM-L6-v2),
  called with one of its gateway tokens.

Usage: ``python scripts/task_backends.py [pytest arguments]``; exits with the first
failing run's status.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
SUITE = sorted(
    str(p.relative_to(REPO))
    for p in (REPO / "tests" / "unit").glob("test_memory_task*.py")
    if "task_runtime" in p.read_text(encoding="utf-8")  # the ones that open a store
)
MODEL = "all-MiniLM-L6-v2"


def _embedding_service(folder: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    """``ditto-worker serve`` with one token; returns the process and its ``/v1`` URL once
    ``/v1/embeddings`` answers (its first call loads the model)."""
    from ditto_worker.testing.servers import free_port

    digest = hashlib.sha256(token.encode()).hexdigest()
    (folder / "ditto.yaml").write_text(
        f"workers: {{infer: {{local: {{autoStart: false}}}}}}\n"
        f"plugins: {{sqlite: {{path: '{folder / 'memory.sqlite'}'}}}}\n"
        f"gateway: {{tokens: [{{sha256: {digest}, tenant: embed, user: tasks}}]}}\n",
        encoding="utf-8",
    )
    port = free_port()
    with (folder / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ditto_worker", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--config", str(folder / "ditto.yaml")],
            cwd=folder, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and process.poll() is None:
        try:
            answer = httpx.post(f"{url}/embeddings", json={"input": "ready?"}, timeout=120,
                                headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            if answer.status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    process.kill()
    raise SystemExit(f"the embedding service did not answer: see {folder / 'serve.log'}")


def _pytest(backend: str, env: dict[str, str], args: list[str]) -> int:
    print(f"== the task suite on {backend}: {len(SUITE)} files", flush=True)
    command = [sys.executable, "-m", "pytest", "-q", *SUITE, *args]
    return subprocess.run(
        command, cwd=REPO, env={**env, "DITTO_TEST_TASK_BACKEND": backend}
    ).returncode


def main(args: list[str]) -> int:
    env = dict(os.environ)
    status = _pytest("postgres", env, args)
    if status:
        return status
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as folder:
        process, url = _embedding_service(Path(folder), token)
        try:
            prefix = "DITTO_WORKER_RETRIEVAL_EMBEDDING_"
            env.update({f"{prefix}BASE_URL": url, f"{prefix}MODEL": MODEL,
                        f"{prefix}DIMENSIONS": "384", f"{prefix}API_KEY": token,
                        f"{prefix}TIMEOUT_S": "120"})  # fmt: skip
            return _pytest("qdrant", env, args)
        finally:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
