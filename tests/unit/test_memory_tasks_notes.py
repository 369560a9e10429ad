"""Code checks the task-state notes it can (issue 35 item 5): each names its stage,
differs from the earlier stages' and says "done" only when the stage's status does. A
failed check is asked once more, then the note is built from the stage's facts and the
artifact says ``"generated": false``.

The bad answers below are HAND-WRITTEN, shaped like a capable model's replies, one per
kind of bad text; the offline model's own failure (one identical sentence for every
stage) is the first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ditto_worker.memory_tasks import run_task_state
from ditto_worker.memory_tasks.contracts import ProjectStage
from ditto_worker.memory_tasks.task_state import note_problems
from tests.unit._task_kit import ScriptedModel, options, task_runtime

REQUEST = {"taskId": "t-1", "kind": "task-state", "backend": "sqlite"}
"""Stages: design (done), build (60% done), tests (not started)."""


def _stage(body: Any) -> str:
    return str(body["messages"][1]["content"].split("Stage ")[1].split(":")[0])


HAND_WRITTEN = {
    # the same sentence for every stage (what the offline model wrote)
    "identical": lambda body: {"note": "The project is progressing well and on schedule."},
    # a fluent note about the wrong stage
    "wrong stage": lambda body: {"note": "The deployment pipeline was configured."},
    # a stage reported done that is not
    "done too early": lambda body: {"note": f"The {_stage(body)} stage is complete."},
}


def test_a_good_note_passes_and_is_asked_once_per_stage(tmp_path: Path) -> None:
    def good(body: Any) -> Any:
        return {"note": f"The {_stage(body)} stage moved forward."}

    with ScriptedModel(good) as model, task_runtime(tmp_path, model) as (runtime, _):
        outcome = run_task_state(runtime, {"request": REQUEST}, options(tmp_path))
        assert outcome.status == "success", outcome.error
        assert model.calls == 3
        assert outcome.artifact is not None and outcome.artifact["generated"] is True


@pytest.mark.parametrize("kind", sorted(HAND_WRITTEN))
def test_a_bad_note_is_asked_once_more_then_built_from_the_facts(tmp_path: Path, kind: str) -> None:
    with ScriptedModel(HAND_WRITTEN[kind]) as model, task_runtime(tmp_path, model) as (rt, _):
        outcome = run_task_state(rt, {"request": REQUEST}, options(tmp_path))
        assert outcome.status == "success", outcome.error
        artifact = outcome.artifact
        assert artifact is not None and artifact["generated"] is False
        message = artifact["message"]
        assert "Stage tests: not started." in message  # every kind fails on this stage
        assert "tests stage is complete" not in message
        if kind != "done too early":  # these fail on every stage
            assert message == "Stage design: done. Stage build: 60% done. Stage tests: not started."
        # at most one retry per stage, never a loop
        assert 3 <= model.calls <= 6
        retried = [b for b in model.bodies if len(b["messages"]) > 2]
        assert retried and all("was refused" in b["messages"][-1]["content"] for b in retried)


def test_the_done_stage_may_say_done_and_a_restored_note_keeps_its_mark() -> None:
    design = ProjectStage(name="design", status="done")
    tests = ProjectStage(name="tests", status="not started")
    assert note_problems("The design stage is done.", design, []) == []
    assert note_problems("The tests stage is done.", tests, []) == [
        "it reports the stage done; its status is 'not started'"
    ]
    assert note_problems("Design is done.", design, ["design is done"]) == [
        "it repeats an earlier stage's note"
    ]
