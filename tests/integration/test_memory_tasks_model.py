"""Real generation and real embedding (issue 25 item 7; the issue's done-when).

* On every backend — SQLite, PostgreSQL (the real server), Qdrant (local mode, real local
  embeddings; no Qdrant server can run here) — ``write`` -> ``update`` -> ``search`` with
  the packaged local model (Qwen2.5-Coder-0.5B through llama.cpp, offline): the model's
  proposals pass the code's admission, the preference is revised in place (same id,
  version 2) and a new task's message is in the remembered language (checked by the
  language identifier) and cites the memory. One model server is shared by the module
  (started once: its start is 5-10 s).
* ``ditto-worker example write --backend sqlite`` then ``ditto-worker example search
  --directory <that directory>``: the CLI starts the packaged model itself.

Minutes on a loaded 2-core machine, so marked slow. A missing model fails, not skips, when
DITTO_REQUIRE_SERVICES=1 or CI=true.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import create_context_worker, create_ditto, create_infer_worker
from ditto_worker.memory_tasks import open_memory_storage, run_search, run_update, run_write
from ditto_worker.memory_tasks.language import is_in_language
from tests.conftest import missing_service
from tests.integration.test_memory_tasks_backends import backend  # noqa: F401 - a fixture
from tests.unit._task_kit import options
from tests.unit.test_memory_tasks_preferences import FRENCH, GERMAN, request

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def local_model() -> Iterator[Any]:
    """The packaged local model, one server for the module (default settings)."""
    try:
        from ditto_worker.infer.local import LocalModelServer

        server = LocalModelServer.start()
    except Exception as exc:  # the model's parts or xllamacpp are missing, it did not start
        missing_service(f"the local model is not installed or does not start: {exc}")
    yield server
    server.stop()


def _text(artifact: dict[str, Any]) -> str:
    """The model's message without the citation code appended."""
    return str(artifact["message"]).rsplit(" (memory ", 1)[0]


@pytest.mark.timeout(1800)
def test_write_update_search_with_the_local_model_on_each_backend(
    tmp_path: Path,
    backend: tuple[str, str],  # noqa: F811 - the fixture imported above
    local_model: Any,
) -> None:
    name, namespace = backend
    storage = open_memory_storage(name, tmp_path, namespace)
    infer = create_infer_worker({"baseUrl": local_model.base_url, "model": local_model.model},
                                env={}, dotenv_path=None)  # fmt: skip
    writer = options(tmp_path, allow_write=True)
    try:
        with create_ditto(workers=[*storage.workers, create_context_worker(), infer]) as rt:
            wrote = run_write(rt, {"request": request("write", "w1", GERMAN)}, writer)
            revised = run_update(rt, {"request": request("update", "u1", FRENCH)}, writer)
            found = run_search(rt, {"request": request("search", "s1")}, options(tmp_path))
    finally:
        storage.close()
    for outcome in (wrote, revised, found):
        assert outcome.status == "success", (outcome.kind, outcome.error)
        assert outcome.artifact is not None
    assert wrote.artifact and revised.artifact and found.artifact
    assert wrote.artifact["admission"]["decision"] == "admitted", wrote.artifact["admission"]
    [first] = wrote.artifact["memories"]
    assert (first["field"], first["value"], first["version"]) == ("language", "de", 1)
    assert is_in_language(_text(wrote.artifact), "de")
    assert revised.artifact["admission"]["decision"] == "admitted", revised.artifact
    [memory] = found.artifact["memories"]
    assert (memory["id"], memory["value"], memory["version"]) == (first["id"], "fr", 2)
    assert found.artifact["applied"]["language"] == "fr"
    assert found.artifact["message"].endswith(f"(memory {memory['id']} v2)")
    assert is_in_language(_text(found.artifact), "fr")


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DITTO_WORKER_INFER_") and k != "DITTO_BROKER_URL"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "ditto_worker", "example", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=1400,
    )  # fmt: skip


@pytest.mark.timeout(3000)
def test_write_then_search_applies_the_preference_with_the_local_model(tmp_path: Path) -> None:
    try:
        from ditto_worker.infer.local import packaged_model_path

        packaged_model_path()
    except Exception as exc:  # the model's parts or xllamacpp are missing
        missing_service(f"the local model is not installed: {exc}")
    wrote = _command("write", "--backend", "sqlite", cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr[-2000:]
    assert "admission: admitted" in wrote.stdout
    folder = tmp_path / re.search(r"^task directory: (\S+)$", wrote.stdout, re.M).group(1)  # type: ignore[union-attr]
    found = _command("search", "--directory", str(folder), cwd=tmp_path)
    assert found.returncode == 0, found.stderr[-2000:]
    request = json.loads((folder / "request.json").read_text())
    artifact = json.loads((folder / "artifacts" / f"{request['taskId']}.json").read_text())
    [memory] = artifact["memories"]
    assert (memory["field"], memory["value"], memory["version"]) == ("language", "de", 1)
    assert artifact["message"].endswith(f"(memory {memory['id']} v1)")
    assert is_in_language(_text(artifact), "de")
