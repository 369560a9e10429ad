"""Run the worked-task suite on PostgreSQL and Qdrant as on SQLite (issue 35 item 8).

``scripts/test.sh`` runs it after the main pytest run. The suite is the task tests under
``tests/unit`` that open a store (the scripted model endpoint; ``tests/unit/_task_kit.py``
picks the backend from ``DITTO_TEST_TASK_BACKEND``):

* ``postgres`` — the server of ``DITTO_TEST_POSTGRES_URL``, one schema per task directory;
* ``qdrant`` — local mode, with ``embedding: http`` against a real HTTP embedding service
  in another process: a ``ditto-worker serve`` started here on a free loopback port, whose
  ``POST /v1/embeddings`` is backed by its retrieval worker's model (all-MiniLM-L6-v2),
  called with one of its gateway tokens. After the run, the serve's ``/metrics`` must show
  the suite's RETRIEVAL.EMBED calls answered (the vectors really came through it).

Only what can differ per backend runs again: a test that takes no fixture (nothing but its
parametrize arguments) opens no store — it checks policy, language or redaction code —
so it is deselected here (it ran on SQLite in the main run). The two runs share nothing
but the machine, so they start at once with the serve: its model loads while both
sessions start up and the PostgreSQL run goes on (a Qdrant test process waits for the
file this script writes once the serve answered, ``tests/unit/_task_kit.py``, so the
serve's count of calls after it is the tests' alone). Each run's output is printed whole
when it ends.

Usage: ``python scripts/task_backends.py [pytest arguments]``; exits with the first
failing run's status (PostgreSQL's, then Qdrant's), 1 when the serve counted no embedding.
"""

from __future__ import annotations

import ast
import hashlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx

REPO = Path(__file__).resolve().parents[1]
SUITE = sorted(
    str(p.relative_to(REPO))
    for p in (REPO / "tests" / "unit").glob("test_memory_task*.py")
    if "task_runtime" in p.read_text(encoding="utf-8")  # the ones that open a store
)
MODEL = "all-MiniLM-L6-v2"
OPENS_A_STORE = ("task_runtime(", "open_memory_storage", "create_ditto", "cli(")
"""Words of a test body that opens a store whatever its signature (none does today)."""


def _store_free(path: str) -> list[str]:
    """``--deselect`` arguments: the tests of ``path`` that take no fixture (only their
    parametrize arguments) and open no store."""
    source = (REPO / path).read_text(encoding="utf-8")
    found: list[str] = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        params: set[str] = set()
        for mark in node.decorator_list:
            if isinstance(mark, ast.Call) and getattr(mark.func, "attr", "") == "parametrize":
                names = mark.args[0]
                if isinstance(names, ast.Constant) and isinstance(names.value, str):
                    params |= {n.strip() for n in names.value.split(",")}
                elif isinstance(names, ast.Tuple | ast.List):
                    params |= {str(e.value) for e in names.elts if isinstance(e, ast.Constant)}
        body = ast.get_source_segment(source, node) or ""
        if {a.arg for a in node.args.args} <= params and not any(w in body for w in OPENS_A_STORE):
            found += ["--deselect", f"{path}::{node.name}"]
    return found


def _serve(folder: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``ditto-worker serve`` with one token (it answers once its model loaded:
    :func:`_ready`); returns the process and its base URL."""
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
    return process, f"http://127.0.0.1:{port}"


def _ready(process: subprocess.Popen[bytes], url: str, token: str, folder: Path) -> None:
    """Wait until ``/v1/embeddings`` answers 200 (its first call loads the model)."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and process.poll() is None:
        try:
            answer = httpx.post(f"{url}/v1/embeddings", json={"input": "ready?"}, timeout=120,
                                headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            if answer.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"the embedding service did not answer: see {folder / 'serve.log'}")


def _embed_calls(url: str) -> dict[str, float]:
    """RETRIEVAL.EMBED calls the serve answered, by status (its ``/metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict[str, float] = {}
    text = httpx.get(f"{url}/metrics", timeout=60).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ditto_gateway_calls_total" and (
                sample.labels.get("node") == "RETRIEVAL.EMBED"
            ):
                status = sample.labels["status"]
                counts[status] = counts.get(status, 0.0) + sample.value
    return counts


def _pytest(
    backend: str, env: dict[str, str], args: list[str], log: IO[bytes]
) -> subprocess.Popen[bytes]:
    print(f"== the task suite on {backend}: {len(SUITE)} files (started)", flush=True)
    deselect = [arg for path in SUITE for arg in _store_free(path)]
    command = [sys.executable, "-m", "pytest", "-q", *SUITE, *deselect, *args]
    return subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env={**env, "DITTO_TEST_TASK_BACKEND": backend})  # fmt: skip


def _report(backend: str, status: int, log: Path, started: float) -> None:
    print(f"== the task suite on {backend}: exit {status}, {time.monotonic() - started:.0f} s "
          "into the step", flush=True)  # fmt: skip
    sys.stdout.write(log.read_text(errors="replace"))
    sys.stdout.flush()


def _run(folder: Path, args: list[str]) -> int:
    token = secrets.token_urlsafe(24)
    process, url = _serve(folder, token)
    runs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    started = time.monotonic()
    prefix = "DITTO_WORKER_RETRIEVAL_EMBEDDING_"
    ready = folder / "embedding-service.ready"
    qdrant = {**os.environ, f"{prefix}BASE_URL": f"{url}/v1", f"{prefix}MODEL": MODEL,
              f"{prefix}DIMENSIONS": "384", f"{prefix}API_KEY": token,
              f"{prefix}TIMEOUT_S": "120",
              "DITTO_TEST_EMBEDDING_READY_FILE": str(ready)}  # fmt: skip
    try:
        for backend, env in (("postgres", dict(os.environ)), ("qdrant", qdrant)):
            log = folder / f"{backend}.log"
            with log.open("wb") as out:
                runs[backend] = (_pytest(backend, env, args, out), log)
        _ready(process, url, token, folder)  # the model loads while the sessions start
        before = _embed_calls(url)  # this script's own readiness calls
        ready.touch()  # the Qdrant test processes wait for it: every later call is theirs
        print(f"== the embedding service answered, {time.monotonic() - started:.0f} s into "
              "the step", flush=True)  # fmt: skip
        statuses = _wait(runs, started)
        calls = {k: v - before.get(k, 0.0) for k, v in _embed_calls(url).items()}
    finally:
        for pytest, _ in runs.values():
            if pytest.poll() is None:
                pytest.kill()
        process.terminate()
        process.wait(60)
    went = calls.get("success", 0.0)
    others = {k: v for k, v in calls.items() if k != "success" and v}
    print(f"== the serve answered {went:.0f} RETRIEVAL.EMBED calls of the Qdrant run "
          f"(other statuses: {others or 'none'})", flush=True)  # fmt: skip
    first = next((s for s in (statuses["postgres"], statuses["qdrant"]) if s), 0)
    if not first and went < 1:
        print("== no embedding of the Qdrant run went through the serve", flush=True)
        return 1
    return first


def _wait(runs: dict[str, tuple[subprocess.Popen[bytes], Path]], started: float) -> dict[str, int]:
    """Each run's exit status; a run's output is printed as soon as it ends."""
    statuses: dict[str, int] = {}
    while len(statuses) < len(runs):
        for backend, (pytest, log) in runs.items():
            if backend not in statuses and pytest.poll() is not None:
                statuses[backend] = pytest.returncode
                _report(backend, pytest.returncode, log, started)
        time.sleep(0.5)
    return statuses


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        return _run(Path(folder), args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
