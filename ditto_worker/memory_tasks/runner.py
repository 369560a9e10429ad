"""The frame every task runs in: one ``runtime.loop`` over restore -> stages -> report ->
publish (SPEC.md MEM-TASK-1/4, MEM-GRAPH-4).

``run_task`` calls ``runtime.loop()`` exactly once. Its plan, :func:`task_loop`, is what
each task exports as ``run_<task>_loop`` — the seed's ``run*Loop`` (memory-capabilities,
"Graph / Loop composition": "shared.ts exports the full-task run*Loop. The run*() entry
invokes runtime.loop() once; its plan yields stage Graphs for Loop-owned scheduling.
Reusable subplans share a 1024-Graph execution budget"). A host joins such plans with
``yield from`` inside its own ``runtime.loop()`` (scope :func:`task_scope`): they share
its budget, and each returns its task's :class:`TaskOutcome`. The plan:

1. restores the task's checkpoints (one MEMORY.GET in ``task:<taskId>``);
2. if the report is already committed, only publishes it again: a publish retry repeats
   no inference and no mutation;
3. else runs the task's own stages (each commits ``progress:<stage>``; a stage whose
   checkpoint was restored is skipped), builds the artifact, checks it against its
   schema, commits it as the ``report`` checkpoint, then publishes
   ``artifacts/<taskId>.json`` atomically.

The loop runs in the controller's trusted scope ``(tenant, user)``; checkpoint nodes
name the task's space, memory nodes run in ``memory``. Nothing of the scope comes from
the request or the model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Mapping
from typing import Any

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory_tasks.artifact import check_artifact, publish_artifact
from ditto_worker.memory_tasks.contracts import (
    TaskInputs,
    TaskKind,
    TaskOptions,
    TaskOutcome,
    TaskRequest,
)
from ditto_worker.memory_tasks.steps import (
    CANDIDATE_KEY,
    REPORT_KEY,
    Plan,
    TaskRun,
    progress_key,
    restore,
    save,
)
from ditto_worker.runtime.graphs import Graph, GraphResult
from ditto_worker.scope import Scope

__all__ = [
    "Body",
    "StopAfterCheckpoint",
    "TaskPlan",
    "base_artifact",
    "run_task",
    "stop_if_asked",
    "task_loop",
    "task_scope",
]

Body = Callable[[TaskRun], Plan]
"""A task's own stages: ``body(run)`` yields stage Graphs and returns the artifact."""


class StopAfterCheckpoint(Exception):  # noqa: N818 - a signal, not an error
    """Raised by the plan after its first checkpoint when the controller asked to stop
    there (``TaskOptions.stop_after_checkpoint``); the task directory stays resumable."""


def base_artifact(run: TaskRun) -> dict[str, Any]:
    """The fields every artifact has, before the task fills in its own."""
    return {
        "schemaVersion": 1,
        "taskId": run.request.task_id,
        "kind": run.request.kind,
        "backend": run.request.backend,
        "project": run.request.project,
        "message": None,
        "memories": [],
        "applied": {"language": "en"},
        "languageCheck": None,
        "progress": list(run.stages),
        "admission": None,
        "mutation": None,
        "context": None,
    }


def _task_plan(run: TaskRun, stages: list[str], body: Body) -> Plan:
    keys = [progress_key(s) for s in stages] + [CANDIDATE_KEY, REPORT_KEY]
    yield from restore(run, keys)
    report = run.checkpoints.get(REPORT_KEY)
    if report is None:
        artifact = yield from body(run)
        artifact["progress"] = list(run.stages)
        check_artifact(artifact)
        report = yield from save(run, REPORT_KEY, artifact, kind="report")
        run.say("report: committed")
    else:
        run.say("report: already committed; publishing it again without inference")
    path = publish_artifact(run.options.artifacts_dir, run.request.task_id, report)
    run.say(f"artifact: {path}")
    return {"artifact": report, "path": str(path)}


def _counting(run: TaskRun, gen: Plan, counter: list[int]) -> Plan:
    """``gen`` as is, counting the Graphs that ran (exceptions and close passed on)."""
    try:
        step = next(gen)
        while True:
            try:
                result = yield step
            except GeneratorExit:
                gen.close()
                raise
            except BaseException as exc:  # budget exhausted, GraphError: the plan's to handle
                step = gen.throw(exc)
                continue
            counter[0] += 1  # a Graph ran and answered
            step = gen.send(result)
    except StopIteration as stop:
        return stop.value


def _task_id(inputs: Any) -> str:
    if isinstance(inputs, TaskInputs):
        return inputs.request.task_id
    raw = inputs.get("request") if isinstance(inputs, Mapping) else None
    task_id = raw.get("taskId") if isinstance(raw, Mapping) else None
    return task_id if isinstance(task_id, str) else ""


def _invalid(kind: TaskKind, inputs: Any, exc: NodeError) -> TaskOutcome:
    return TaskOutcome(task_id=_task_id(inputs), kind=kind, status="failed", graphs=0,
                       error={"code": exc.code, "message": exc.safe_message})  # fmt: skip


def _policy(policy: Any) -> Any:
    from ditto_worker.memory_tasks.policy import PolicyError
    from ditto_worker.memory_tasks.policy_config import resolve_policy

    try:
        return resolve_policy(policy)
    except (PolicyError, TypeError, ValueError) as exc:
        raise NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: policy: {exc}") from None


TaskPlan = Generator[tuple[Graph, Any], GraphResult, TaskOutcome]
"""A whole task as a sub-plan: yields its stage Graphs, returns its :class:`TaskOutcome`."""


def task_loop(
    kind: TaskKind,
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    body: Body,
    stages: Callable[[TaskRequest], list[str]],
    policy: Any = None,
) -> TaskPlan:
    """The full task as a plan for a host's ``runtime.loop()`` (the seed's ``run*Loop``;
    see the module docstring for its steps).

    A node failure ends the task, not the host's loop: its code is returned in a
    ``failed`` :class:`TaskOutcome` (``GRAPH_BUDGET_EXHAUSTED`` included: the loop then
    fails at the host's next ``yield``); ``checkpointed`` when the controller asked to
    stop after the first checkpoint. Cancellation and the deadline are the loop's: it
    closes the plan. A bad request or policy returns ``failed`` / ``INVALID_INPUT``
    before any Graph is yielded.

    Args:
        kind: the task kind; the request must be of it.
        inputs: ``{request, model}``.
        options: the controller's options (tenant, user, permission, artifacts folder);
            ``options.timeout_s`` and ``options.cancel`` are the host loop's business.
        body: the task's stages.
        stages: ``stages(request)`` -> the names of the progress checkpoints the task may
            have committed.
        policy: as for :func:`run_task` (a ``PreferencePolicy``, a ``tasks.policy``
            mapping, or ``None`` for the default).

    Returns:
        The task's :class:`TaskOutcome`; ``graphs`` counts the Graphs this task ran.
    """
    try:
        parsed = TaskInputs.of(inputs)
        if parsed.request.kind != kind:
            raise NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: request.kind is "
                            f"{parsed.request.kind!r}, this task is {kind!r}")  # fmt: skip
        task_scope(options)
        chosen = _policy(policy)
    except NodeError as exc:
        return _invalid(kind, inputs, exc)
    request = parsed.request
    counter = [0]
    run = TaskRun(request, parsed.model, options, policy=chosen)

    def outcome(status: Any, **fields: Any) -> TaskOutcome:
        return TaskOutcome(task_id=request.task_id, kind=kind, status=status,
                           graphs=counter[0], **fields)  # fmt: skip

    try:
        result = yield from _counting(run, _task_plan(run, stages(request), body), counter)
    except StopAfterCheckpoint:
        return outcome("checkpointed")
    except NodeError as exc:
        return outcome("failed", error={"code": exc.code, "message": exc.safe_message})
    return outcome("success", artifact=result["artifact"], artifact_path=result["path"])


def run_task(
    runtime: Any,
    kind: TaskKind,
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    body: Body,
    stages: Callable[[TaskRequest], list[str]],
    policy: Any = None,
) -> TaskOutcome:
    """Run one task (see the module docstring): :func:`task_loop` in one
    ``runtime.loop()`` scoped to the controller's tenant and user.

    Args:
        runtime: a :class:`~ditto_worker.runtime.Runtime` serving MEMORY (+ INFER,
            CONTEXT as the task needs).
        kind: the task kind; the request must be of it.
        inputs: ``{request, model}``.
        options: the controller's options (tenant, user, permission, artifacts folder).
        body: the task's stages.
        stages: ``stages(request)`` -> the names of the progress checkpoints the task may
            have committed.
        policy: ``policy=`` of the entry: a ``PreferencePolicy``, a ``tasks.policy``
            mapping (validated here: ``INVALID_INPUT`` naming the key before any call) or
            ``None`` for the default.

    Returns:
        A :class:`TaskOutcome`; a failure carries its code (``INVALID_INPUT`` for a bad
        request — nothing was called —, ``PERMISSION_DENIED``, a node's code,
        ``GRAPH_BUDGET_EXHAUSTED`` …).
    """
    plan = task_loop(kind, inputs, options, body, stages, policy)
    try:
        scope = task_scope(options)
    except NodeError:  # the plan finds it too, after the request: its outcome, as is
        return _unyielded(plan)
    task_id = _task_id(inputs)
    result = runtime.loop(
        lambda _: plan, None, scope=scope, timeout=options.timeout_s, cancel=options.cancel,
        run_id=f"task-{task_id or 'invalid'}-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    if result.status == "success":
        outcome: TaskOutcome = result.output
        return outcome
    error = result.error
    fields = {} if error is None else {"error": {"code": error.code, "message": error.message}}
    return TaskOutcome(task_id=task_id, kind=kind, status=result.status,
                       graphs=len(result.graphs), **fields)  # fmt: skip


def task_scope(options: TaskOptions) -> Scope:
    """The scope a task's loop runs in: the controller's ``(tenant, user)``. A host
    running :func:`task_loop` plans in its own ``runtime.loop()`` passes it as the loop's
    ``scope`` (every task of that loop then has this tenant and user).

    Raises:
        NodeError: ``PERMISSION_DENIED`` / ``INVALID_INPUT`` naming ``scope.tenant`` or
            ``scope.user`` (not a valid scope id).
    """
    return Scope(options.tenant, options.user)


def _unyielded(plan: TaskPlan) -> TaskOutcome:
    """The outcome of a plan that ends before its first Graph (an invalid task)."""
    try:
        step = next(plan)
    except StopIteration as stop:
        outcome: TaskOutcome = stop.value
        return outcome
    plan.close()
    raise AssertionError(f"an invalid task yielded {step!r}")  # pragma: no cover


def stop_if_asked(run: TaskRun) -> None:
    """Raise :class:`StopAfterCheckpoint` when the controller asked to stop after the
    first checkpoint (``TaskOptions.stop_after_checkpoint``)."""
    if run.options.stop_after_checkpoint:
        raise StopAfterCheckpoint()
