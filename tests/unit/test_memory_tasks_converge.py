"""Every task directory converges (issue 35 item 3).

A second ``example write --directory D`` for a preference already stored used to save
its candidate, then fail ``CONFLICT`` on every resume, with ``update --directory D``
refused: the directory was stuck for good. Now the same value completes as "already
stored" (the artifact says so and cites the stored record), another value is a clear
refusal naming ``update``, and a candidate left by an older run converges the same way.
The model is the scripted fake endpoint (``tests.unit.test_cli_example``'s ``cli``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ditto_worker import Scope
from ditto_worker.cli.commands import app
from ditto_worker.memory_tasks import run_update, run_write
from tests.unit._task_kit import ScriptedModel, options, task_runtime
from tests.unit.test_cli_example import directory_of
from tests.unit.test_cli_example import reply as cli_reply
from tests.unit.test_memory_tasks_preferences import (
    FRENCH,
    GERMAN,
    MESSAGES,
    model,
    preferences,
    proposing,
    request,
)

ALICE = Scope("acme", "alice")


def reply(body: Any) -> Any:
    """Proposes the first pair code listed (``i. sentence -> field=value``), writes the
    message in the language asked, else as ``test_cli_example.reply``."""
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    if "message" in schema.get("properties", {}):
        asked = body["messages"][0]["content"]
        code = "fr" if "French" in asked else "de" if "German" in asked else "en"
        return {"message": MESSAGES[code]}
    if "proposals" not in schema.get("properties", {}):
        return cli_reply(body)
    first = body["messages"][-1]["content"].splitlines()[0]
    head, pairs = first.rsplit(" -> ", 1)
    index, quote = head.split(". ", 1)
    field, value = pairs.split(", ")[0].split("=", 1)
    return {"proposals": [{"candidate_index": int(index), "quote": quote, "field": field,
                           "value": value}]}  # fmt: skip


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    with ScriptedModel(reply) as model:
        monkeypatch.setenv("DITTO_WORKER_INFER_BASE_URL", model.server.base_url)
        monkeypatch.delenv("DITTO_BROKER_URL", raising=False)
        yield lambda *args: CliRunner().invoke(app, ["example", *args])


def _artifact(folder: Path) -> dict[str, Any]:
    task_id = json.loads((folder / "request.json").read_text())["taskId"]
    loaded: dict[str, Any] = json.loads((folder / "artifacts" / f"{task_id}.json").read_text())
    return loaded


def test_a_second_write_of_the_same_preference_completes_as_already_stored(
    cli: Any,
) -> None:
    first = cli("write")
    assert first.exit_code == 0, first.output
    folder = directory_of(first.output)
    [stored] = _artifact(folder)["memories"]
    second = cli("write", "--directory", str(folder))
    assert second.exit_code == 0, second.output
    assert "admission: already_stored" in second.output
    artifact = _artifact(folder)
    assert artifact["admission"]["decision"] == "already_stored"
    assert any("already stored" in r for r in artifact["admission"]["reasons"])
    assert artifact["mutation"] is None
    assert artifact["memories"] == [stored]  # the stored record, cited as a write would
    assert f"(memory {stored['id']} v1)" in artifact["message"]
    again = cli("write", "--directory", str(folder))  # and again: still converges
    assert again.exit_code == 0 and "admission: already_stored" in again.output


def test_a_write_of_another_value_is_refused_naming_update_and_update_then_works(
    cli: Any,
    tmp_path: Path,
) -> None:
    first = cli("write")
    assert first.exit_code == 0, first.output
    folder = directory_of(first.output)
    french = tmp_path / "french.json"
    french.write_text(json.dumps([{"role": "user", "content": FRENCH}]))
    refused = cli("write", "--directory", str(folder), "--conversation", str(french))
    assert refused.exit_code == 1, refused.output
    assert "ditto-worker example update --directory" in refused.output
    artifact = _artifact(folder)
    assert artifact["admission"]["decision"] == "rejected"
    assert any("run the update task" in r for r in artifact["admission"]["reasons"])
    assert artifact["mutation"] is None
    # the directory is not stuck: the task is done, update runs next
    updated = cli("update", "--directory", str(folder), "--conversation", str(french))
    assert updated.exit_code == 0, updated.output
    assert "admission: admitted" in updated.output
    [record] = _artifact(folder)["mutation"]["records"]
    assert record["version"] == 2


def _stale_candidate(rt: Any, task_id: str, value: str, quote: str) -> None:
    """The checkpoints an earlier version left: propose done, candidate committed, the
    mutation not yet applied (it then failed CONFLICT on every resume)."""
    op = f"{task_id}:write"
    decision = {"admitted": True, "field": "language", "value": value, "quote": quote,
                "reasons": [], "message": "admitted"}  # fmt: skip
    record = {"key": "preference:language",
              "content": {"field": "language", "value": value, "statement": quote},
              "metadata": {"kind": "preference", "field": "language", "value": value,
                           "version": 1, "quote": quote, "operationId": op,
                           "taskId": task_id}}  # fmt: skip
    candidate = {"node": "MEMORY.WRITE", "operationId": op, "memories": [record], "previous": {}}
    checkpoints = [
        {"key": "progress:propose", "content": {"stage": "propose", "output": [decision]},
         "metadata": {"kind": "checkpoint", "taskId": task_id}},
        {"key": "candidate", "content": candidate,
         "metadata": {"kind": "candidate", "taskId": task_id}},
    ]  # fmt: skip
    task = Scope.for_task("acme", "alice", task_id)
    done = rt.invoke("MEMORY.WRITE", {"memories": checkpoints}, scope=task)
    assert done.status == "success", done.error


def test_a_candidate_left_by_an_older_run_converges(tmp_path: Path) -> None:
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (rt, _):
        wrote = run_write(rt, {"request": request("write", "w1", GERMAN)},
                          options(tmp_path, allow_write=True))  # fmt: skip
        assert wrote.status == "success", wrote.error
        _stale_candidate(rt, "w2", "de", GERMAN)
        same = run_write(rt, {"request": request("write", "w2", GERMAN)},
                         options(tmp_path, allow_write=True))  # fmt: skip
        assert same.status == "success", same.error
        assert same.artifact is not None
        assert same.artifact["admission"]["decision"] == "already_stored"
        _stale_candidate(rt, "w3", "fr", FRENCH)
        other = run_write(rt, {"request": request("write", "w3", FRENCH)},
                          options(tmp_path, allow_write=True))  # fmt: skip
        assert other.status == "success", other.error
        assert other.artifact is not None
        assert other.artifact["admission"]["decision"] == "rejected"
        assert [p.content["value"] for p in preferences(rt)] == ["de"]


def test_interleaved_updates_converge(tmp_path: Path) -> None:
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (rt, _):
        run_write(rt, {"request": request("write", "w1", GERMAN)},
                  options(tmp_path, allow_write=True))  # fmt: skip
    french = model(proposing(FRENCH, "fr"), language=None)
    with french as fake, task_runtime(tmp_path, fake) as (rt, _):
        stop = options(tmp_path, allow_write=True, stop_after_checkpoint=True)
        assert run_update(rt, {"request": request("update", "u1", FRENCH)}, stop).status == (
            "checkpointed"
        )
        # another controller revises the record before u1 resumes
        done = run_update(rt, {"request": request("update", "u2", FRENCH)},
                          options(tmp_path, allow_write=True))  # fmt: skip
        assert done.status == "success", done.error
        # u1's candidate is made after its propose checkpoint: it reads v2 and revises it;
        # a second resume replays nothing
        for _ in range(2):
            resumed = run_update(rt, {"request": request("update", "u1", FRENCH)},
                                 options(tmp_path, allow_write=True))  # fmt: skip
            assert resumed.status == "success", resumed.error
        [pref] = preferences(rt)
        assert pref.metadata["version"] == 3


def test_an_update_candidate_overtaken_by_another_revision_ends_rejected(
    tmp_path: Path,
) -> None:
    """A candidate read at v1, the record revised to v2 before the mutation: the task ends
    ``rejected`` saying to run update again (it used to fail CONFLICT on every resume)."""
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (rt, _):
        run_write(rt, {"request": request("write", "w1", GERMAN)},
                  options(tmp_path, allow_write=True))  # fmt: skip
    french = model(proposing(FRENCH, "fr"), language=None)
    with french as fake, task_runtime(tmp_path, fake) as (rt, _):
        [pref] = preferences(rt)
        done = run_update(rt, {"request": request("update", "u1", FRENCH)},
                          options(tmp_path, allow_write=True))  # fmt: skip
        assert done.status == "success", done.error
        op = "u2:update"
        decision = {"admitted": True, "field": "language", "value": "fr", "quote": FRENCH,
                    "reasons": [], "message": "admitted"}  # fmt: skip
        entry = {"id": pref.id, "ifMetadata": {"version": 1},
                 "content": {"field": "language", "value": "fr", "statement": FRENCH},
                 "metadata": {"kind": "preference", "field": "language", "value": "fr",
                              "version": 2, "quote": FRENCH, "operationId": op,
                              "taskId": "u2"}}  # fmt: skip
        candidate = {"node": "MEMORY.UPDATE", "operationId": op, "memories": [entry],
                     "previous": {pref.id: 1}}  # fmt: skip
        stale = [
            {"key": "progress:propose", "content": {"stage": "propose", "output": [decision]},
             "metadata": {"kind": "checkpoint", "taskId": "u2"}},
            {"key": "candidate", "content": candidate,
             "metadata": {"kind": "candidate", "taskId": "u2"}},
        ]  # fmt: skip
        task = Scope.for_task("acme", "alice", "u2")
        assert rt.invoke("MEMORY.WRITE", {"memories": stale}, scope=task).status == "success"
        for _ in range(2):
            resumed = run_update(rt, {"request": request("update", "u2", FRENCH)},
                                 options(tmp_path, allow_write=True))  # fmt: skip
            assert resumed.status == "success", resumed.error
            assert resumed.artifact is not None
            admission = resumed.artifact["admission"]
            assert admission["decision"] == "rejected"
            assert any("run the update task again" in r for r in admission["reasons"])
        [now] = preferences(rt)
        assert now.metadata["version"] == 2
