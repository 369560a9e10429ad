"""``ditto-worker example``: a task directory per run, resume with --directory, a new task
against the same database and user, an unfinished task of another kind refused (issue 25
item 5). The model is the scripted fake endpoint (DITTO_WORKER_INFER_BASE_URL)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ditto_worker.cli.commands import app
from tests.unit._task_kit import ScriptedModel

GERMAN_MESSAGE = "Das Projekt Atlas kommt gut voran: das Design ist fertig."


def reply(body: Any) -> Any:
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    properties = schema.get("properties", {})
    if "proposals" in properties:
        listing = body["messages"][-1]["content"]
        index, quote = listing.splitlines()[0].rsplit(" -> ", 1)[0].split(". ", 1)
        return {"proposals": [{"candidate_index": int(index), "quote": quote,
                               "field": "language", "value": "de"}]}  # fmt: skip
    if "note" in properties:  # a note that passes code's checks: it names its stage
        stage = body["messages"][-1]["content"].split("Stage ")[1].split(":")[0]
        return {"note": f"The {stage} stage moved forward."}
    return {"message": GERMAN_MESSAGE}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    with ScriptedModel(reply) as model:
        monkeypatch.setenv("DITTO_WORKER_INFER_BASE_URL", model.server.base_url)
        monkeypatch.delenv("DITTO_BROKER_URL", raising=False)

        def run(*args: str) -> Any:
            return CliRunner().invoke(app, ["example", *args])

        run.model = model  # type: ignore[attr-defined]
        yield run


def directory_of(output: str) -> Path:
    match = re.search(r"^task directory: (\S+)$", output, re.M)
    assert match is not None, output
    return Path(match.group(1))


def test_write_then_search_in_that_directory_applies_the_new_preference(cli: Any) -> None:
    wrote = cli("write", "--backend", "sqlite")
    assert wrote.exit_code == 0, wrote.output
    folder = directory_of(wrote.output)
    assert folder.parent.name == ".examples-memory-tasks"
    assert (folder / "memory.sqlite").is_file() and (folder / "request.json").is_file()
    assert "admission: admitted" in wrote.output
    found = cli("search", "--directory", str(folder))
    assert found.exit_code == 0, found.output
    request = json.loads((folder / "request.json").read_text())
    artifact = json.loads((folder / "artifacts" / f"{request['taskId']}.json").read_text())
    [memory] = artifact["memories"]
    assert memory["field"] == "language" and memory["value"] == "de"
    assert f"(memory {memory['id']} v1)" in found.output
    assert f"artifact: {folder / 'artifacts' / request['taskId']}.json" in found.output
    # the user kept in the directory is the one the write task stored the preference for
    assert (folder / "requests").is_dir()


def test_checkpoint_then_resume_and_another_kind_is_refused(cli: Any) -> None:
    first = cli("task-state", "--checkpoint")
    assert first.exit_code == 0, first.output
    assert "stopped after the first checkpoint" in first.output
    folder = directory_of(first.output)
    refused = cli("search", "--directory", str(folder))
    assert refused.exit_code == 2
    assert "unfinished task-state task" in refused.output
    resumed = cli("task-state", "--directory", str(folder))
    assert resumed.exit_code == 0, resumed.output
    assert "1-design: restored from the checkpoint" in resumed.output
    assert cli.model.calls == 3  # three stages, none inferred twice


def test_a_conversation_file_replaces_the_built_in_one(cli: Any, tmp_path: Path) -> None:
    said = [{"role": "user", "content": "Please always write to me in German."}]
    path = tmp_path / "said.json"
    path.write_text(json.dumps(said))
    wrote = cli("write", "--conversation", str(path))
    assert wrote.exit_code == 0, wrote.output
    request = json.loads((directory_of(wrote.output) / "request.json").read_text())
    assert request["conversation"] == said


def test_unknown_kind_or_backend_is_one_line(cli: Any) -> None:
    assert cli("recall").exit_code == 2
    bad = cli("search", "--backend", "mongo")
    assert bad.exit_code == 2 and "unknown backend" in bad.output
