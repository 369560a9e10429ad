"""Real generation (issue 25 item 7; the issue's done-when): ``ditto-worker example write
--backend sqlite`` then ``ditto-worker example search --directory <that directory>`` with
the packaged local model (Qwen2.5-Coder-0.5B through llama.cpp, offline). Minutes on a
loaded 2-core machine, so marked slow. Fails, not skips, without the model when
DITTO_REQUIRE_SERVICES=1 or CI=true."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ditto_worker.memory_tasks.language import is_in_language
from tests.conftest import missing_service


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DITTO_WORKER_INFER_") and k != "DITTO_BROKER_URL"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "ditto_worker", "example", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=1400,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.integration
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
    text = artifact["message"].rsplit(" (memory ", 1)[0]
    assert is_in_language(text, "de")
