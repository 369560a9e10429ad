"""The ``task-state`` task: infer progress stage by stage, persist it, restore it, continue.

The seed's table (memory-capabilities): "task-state.ts — Infer progress, persist it,
restore with MEMORY.GET — Continue from committed progress without repeating completed
stages" (SPEC.md MEM-TASK-1/2/4).

For each stage of the request's project, in order: INFER.GENERATE writes one progress
note (JSON ``{"note": …}``, the stage's status and the notes before it as input), then
the note is committed as the checkpoint ``progress:<n>-<stage>`` in the task space
``task:<taskId>`` (MEMORY.WRITE; ``metadata.kind=checkpoint``: never embedded, never
recalled). A resumed task restores the committed notes with MEMORY.GET and infers only
the stages after them. The message is the notes in stage order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory_tasks.contracts import ProjectStage, TaskInputs, TaskOptions, TaskOutcome
from ditto_worker.memory_tasks.runner import (
    TaskPlan,
    base_artifact,
    run_task,
    stop_if_asked,
    task_loop,
)
from ditto_worker.memory_tasks.steps import Plan, TaskRun, ask, complete

__all__ = [
    "NOTE_SCHEMA",
    "note_problems",
    "run_task_state",
    "run_task_state_loop",
    "stage_names",
]

NOTE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"note": {"type": "string", "minLength": 1, "maxLength": 300}},
    "required": ["note"],
    "additionalProperties": False,
}
"""The reply of one stage's INFER call."""

_SYSTEM = (
    'You write project progress notes. Reply with JSON {"note": ...}: one short '
    "English sentence about the given stage."
)


def stage_names(stages: list[ProjectStage]) -> list[str]:
    """The checkpoint stage names ``<n>-<stage name>`` (numbered: names may repeat)."""
    return [f"{n}-{stage.name}" for n, stage in enumerate(stages, start=1)]


def _messages(run: TaskRun, stage: ProjectStage, notes: list[str]) -> list[dict[str, str]]:
    earlier = " ".join(notes[-2:]) or "none"
    user = (
        f"Project {run.request.project}. Stage {stage.name}: {stage.status}. "
        f"Earlier notes: {earlier}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def _note(reply: Any) -> str:
    note = reply.get("note") if isinstance(reply, Mapping) else None
    if not isinstance(note, str) or not note.strip():
        raise NodeError(ErrorCode.INFER_INVALID_OUTPUT, "the model's progress note is empty")
    return note.strip()


_DONE = re.compile(r"\b(?:done|complete[ds]?|completed|finished|shipped)\b", re.IGNORECASE)


def _plain(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def note_problems(note: str, stage: ProjectStage, earlier: list[str]) -> list[str]:
    """What code can check of a generated note (issue 35 item 5): it names its stage, it
    is not a copy of an earlier stage's note, and it reports the stage done only when the
    stage's status says so. Empty: the note passes."""
    problems: list[str] = []
    if _plain(stage.name) not in _plain(note):
        problems.append(f"it does not name the stage {stage.name!r}")
    if _plain(note) in {_plain(e) for e in earlier}:
        problems.append("it repeats an earlier stage's note")
    if _DONE.search(note) and not _DONE.search(stage.status):
        problems.append(f"it reports the stage done; its status is {stage.status!r}")
    return problems


def _checked_note(run: TaskRun, stage: ProjectStage, notes: list[str]) -> Plan:
    """``(note, generated)``: the model's note when it passes :func:`note_problems`, asked
    once more with the problems named, else a note built from the stage's own facts."""
    messages = _messages(run, stage, notes)
    for _ in range(2):
        note = _note((yield from ask(run, "infer-progress", messages, NOTE_SCHEMA)))
        problems = note_problems(note, stage, notes)
        if not problems:
            return note, True
        run.say(f"note: the model's note for {stage.name} failed a check; asking once more")
        fix = f"Your note was refused: {'; '.join(problems)}. Write it again."
        messages = [*messages, {"role": "assistant", "content": note},
                    {"role": "user", "content": fix}]  # fmt: skip
    return f"Stage {stage.name}: {stage.status}.", False


def _body(run: TaskRun) -> Plan:
    notes: list[str] = []
    generated = True
    stages = run.request.stages
    for name, stage in zip(stage_names(stages), stages, strict=True):
        done = run.done(name)
        if isinstance(done, Mapping) and isinstance(done.get("note"), str):
            notes.append(done["note"])
            generated = generated and done.get("generated", True) is not False
            continue
        note, made = yield from _checked_note(run, stage, notes)
        yield from complete(run, name, {"note": note, "generated": made})
        notes.append(note)
        generated = generated and made
        stop_if_asked(run)
    artifact = base_artifact(run)
    artifact["message"] = " ".join(notes)
    artifact["generated"] = generated
    return artifact


def run_task_state(
    runtime: Any,
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskOutcome:
    """Run the ``task-state`` task (see the module docstring).

    Args:
        runtime: a runtime serving MEMORY (over the task's storage) and INFER.GENERATE.
        inputs: ``{request, model}``; ``request.kind`` must be ``task-state``.
        options: the controller's tenant, user, artifacts folder, deadline, cancellation;
            ``stop_after_checkpoint`` ends the task after its first new checkpoint.
        policy: as for ``run_write`` (validated; task-state stores no preference).

    Returns:
        The :class:`TaskOutcome`; on success ``artifact_path`` is
        ``<artifacts_dir>/<taskId>.json``.
    """
    return run_task(runtime, "task-state", inputs, options, _body,
                    lambda r: stage_names(r.stages), policy)  # fmt: skip


def run_task_state_loop(
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskPlan:
    """The ``task-state`` task as a plan for the host's own ``runtime.loop()`` — the
    seed's ``runTaskStateLoop`` (memory-capabilities, "Graph / Loop composition");
    :func:`run_task_state` runs exactly this plan in a loop of its own.

    Each stage's INFER depends on the notes before it, and its checkpoint on its note:
    one Graph after the other. ``inputs``, ``options``, ``policy`` and the result as for
    :func:`~ditto_worker.memory_tasks.search.run_search_loop`.
    """
    return task_loop("task-state", inputs, options, _body, lambda r: stage_names(r.stages),
                     policy)  # fmt: skip
