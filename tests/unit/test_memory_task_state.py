"""The ``task-state`` task on SQLite with a scripted model (SPEC.md MEM-TASK-1/2/4): progress
inferred per stage, each stage committed in the task space, a resumed task continues
without repeating completed stages, the report commits before the artifact is published,
and a publish retry repeats no inference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from ditto_worker import Scope
from ditto_worker.memory_tasks import artifact_schema, run_task_state
from tests.unit._task_kit import ScriptedModel, options, task_runtime


def request(task_id: str = "t-1", **fields: Any) -> dict[str, Any]:
    return {"taskId": task_id, "kind": "task-state", "backend": "sqlite", **fields}


def notes(body: Any) -> dict[str, str]:
    stage = body["messages"][-1]["content"].split("Stage ")[1].split(":")[0]
    return {"note": f"The {stage} stage moved forward."}


def test_every_stage_is_inferred_once_and_committed_in_the_task_space(tmp_path: Path) -> None:
    # MEM-TASK-1, MEM-TASK-2: checkpoints live in task:<taskId>, never in memory
    with ScriptedModel(notes) as model, task_runtime(tmp_path, model) as (runtime, _):
        outcome = run_task_state(runtime, {"request": request()}, options(tmp_path))
        assert outcome.status == "success", outcome.error
        assert model.calls == 3
        alice = Scope("acme", "alice")
        assert runtime.invoke("MEMORY.QUERY", {}, scope=alice).output.items == []
        task = Scope.for_task("acme", "alice", "t-1")
        saved = runtime.invoke("MEMORY.QUERY", {}, scope=task).output.items
        assert [item.key for item in saved] == [
            "progress:1-design", "progress:2-build", "progress:3-tests", "report",
        ]  # fmt: skip
        assert {item.metadata["kind"] for item in saved} == {"checkpoint", "report"}
    path = Path(outcome.artifact_path or "")
    assert path == tmp_path / "artifacts" / "t-1.json"
    artifact = json.loads(path.read_text())
    jsonschema.validate(artifact, artifact_schema())
    assert artifact == outcome.artifact
    assert artifact["message"] == (
        "The design stage moved forward. The build stage moved forward. "
        "The tests stage moved forward."
    )
    assert [p["stage"] for p in artifact["progress"]] == ["1-design", "2-build", "3-tests"]
    assert not any(p["restored"] for p in artifact["progress"])


def test_a_resumed_task_continues_without_repeating_completed_stages(tmp_path: Path) -> None:
    lines: list[str] = []
    with ScriptedModel(notes) as model:
        with task_runtime(tmp_path, model) as (runtime, _):
            first = run_task_state(
                runtime, {"request": request()},
                options(tmp_path, stop_after_checkpoint=True, on_stage=lines.append),
            )  # fmt: skip
        assert first.status == "checkpointed"
        assert model.calls == 1
        assert not (tmp_path / "artifacts" / "t-1.json").exists()
        with task_runtime(tmp_path, model) as (runtime, _):  # a new controller process
            second = run_task_state(
                runtime, {"request": request()}, options(tmp_path, on_stage=lines.append)
            )
        assert second.status == "success", second.error
        assert model.calls == 3  # stages 2 and 3 only
        stages = [m["messages"][-1]["content"] for m in model.bodies]
        assert "Stage design" in stages[0] and "Stage build" in stages[1]
        # the resumed stage 2 saw stage 1's committed note
        assert "The design stage moved forward." in stages[1]
    assert second.artifact is not None
    assert [p["restored"] for p in second.artifact["progress"]] == [True, False, False]
    assert "1-design: restored from the checkpoint" in lines


def test_a_publish_retry_repeats_no_inference(tmp_path: Path) -> None:
    # MEM-TASK-4: the report commits before the artifact is published
    with ScriptedModel(notes) as model:
        with task_runtime(tmp_path, model) as (runtime, _):
            first = run_task_state(runtime, {"request": request()}, options(tmp_path))
        assert first.status == "success"
        path = Path(first.artifact_path or "")
        published = path.read_bytes()
        path.unlink()  # the publication was lost
        with task_runtime(tmp_path, model) as (runtime, _):
            again = run_task_state(runtime, {"request": request()}, options(tmp_path))
        assert again.status == "success"
        assert model.calls == 3
        assert path.read_bytes() == published
        assert again.graphs == 1  # the restore only
    assert [p.name for p in path.parent.iterdir()] == ["t-1.json"]  # no temp file left


def test_an_empty_note_fails_the_task_and_commits_nothing_for_its_stage(tmp_path: Path) -> None:
    replies = [{"note": "Design is done."}, {"note": "   "}]
    with ScriptedModel(replies) as model, task_runtime(tmp_path, model) as (runtime, _):
        outcome = run_task_state(runtime, {"request": request()}, options(tmp_path))
        assert outcome.status == "failed"
        assert outcome.error is not None and outcome.error["code"] == "INFER_INVALID_OUTPUT"
        task = Scope.for_task("acme", "alice", "t-1")
        keys = [i.key for i in runtime.invoke("MEMORY.QUERY", {}, scope=task).output.items]
        assert keys == ["progress:1-design"]
    assert not (tmp_path / "artifacts").exists()


def test_the_request_file_cannot_name_the_scope_or_another_kind(tmp_path: Path) -> None:
    with ScriptedModel(notes) as model, task_runtime(tmp_path, model) as (runtime, _):
        for bad, field in [
            (request(tenant="evil"), "tenant"),
            (request(user="bob"), "user"),
            ({**request(), "kind": "search"}, "kind"),
            (request(taskId="../x"), "taskId"),
        ]:
            outcome = run_task_state(runtime, {"request": bad}, options(tmp_path))
            assert outcome.status == "failed", field
            assert outcome.error is not None and outcome.error["code"] == "INVALID_INPUT"
        assert model.calls == 0


def test_importing_the_tasks_prints_nothing_and_starts_nothing() -> None:
    # the seed: "Imports do not connect or execute" (connections: tests/unit/test_layers.py)
    import subprocess
    import sys

    code = "import ditto_worker.memory_tasks, sys; print(sorted(sys.modules).count('xllamacpp'))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout == "0\n"
    assert done.stderr == ""


def test_every_graph_of_the_task_counts_against_the_one_loop_budget(tmp_path: Path) -> None:
    # MEM-GRAPH-4: restore, stages and checkpoints share the loop's budget (here 4 Graphs:
    # restore, note 1, its checkpoint, note 2 — the next checkpoint is one too many)
    from ditto_worker import create_ditto, create_infer_worker
    from ditto_worker.config import load_runtime_config
    from ditto_worker.memory_tasks import open_memory_storage

    config = load_runtime_config(None)
    config = config.model_copy(update={"graph": config.graph.model_copy(update={"loop_budget": 4})})
    storage = open_memory_storage("sqlite", tmp_path)
    with ScriptedModel(notes) as model:
        infer = create_infer_worker({"baseUrl": model.server.base_url}, env={}, dotenv_path=None)
        with create_ditto(workers=[*storage.workers, infer], config=config) as runtime:
            outcome = run_task_state(runtime, {"request": request()}, options(tmp_path))
    storage.close()
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error["code"] == "GRAPH_BUDGET_EXHAUSTED"
    assert outcome.graphs == 4
