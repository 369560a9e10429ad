"""Stage Graphs and the sub-plans every task shares (SPEC.md MEM-GRAPH-4/5, MEM-TASK-2/4).

Every effect is a node call of a stage Graph the task's plan yields to ``runtime.loop``
(sub-plans joined with ``yield from`` share its 1,024-Graph budget, recovery included):

* checkpoints live in the task's own space ``task:<taskId>`` (keys
  ``<tenant>:<user>:task:<taskId>:*``; Graph nodes with ``space=``): ``progress:<stage>``
  per completed stage, ``candidate`` (write / update: the admitted change, committed
  before the mutation) and ``report`` (the artifact, committed before it is published).
  Progress and report are separate records. They are never searched (SEARCH runs in
  ``memory``) and carry ``metadata.kind`` ``checkpoint`` / ``candidate`` / ``report``, so
  a store that embeds only ``kind=preference`` (Qdrant) stores them without vectors;
* :func:`restore` reads them back with one MEMORY.GET at the start, so a resumed task
  skips every stage whose checkpoint committed and never repeats its inference;
* :func:`save` writes one checkpoint (once: a checkpoint that is already there is not
  written again), secret-shaped spans redacted.

A failed node ends the task: :func:`require` raises the node's own error code, which ends
the loop ``failed`` with it (MEM-ERR-5: no automatic retry; MEM-TASK-5: outages fail
explicitly, storage is never switched).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory_tasks.contracts import ModelOptions, TaskOptions, TaskRequest
from ditto_worker.memory_tasks.secret_shapes import redact, redact_json
from ditto_worker.runtime.graphs import Graph, GraphResult, graph
from ditto_worker.scope import TASK_SPACE_PREFIX

__all__ = [
    "REPORT_KEY",
    "CANDIDATE_KEY",
    "Plan",
    "TaskRun",
    "ask",
    "complete",
    "mutate",
    "output_of",
    "progress_key",
    "require",
    "restore",
    "save",
]

REPORT_KEY = "report"
"""Checkpoint key of the committed artifact (the report)."""
CANDIDATE_KEY = "candidate"
"""Checkpoint key of the admitted change of a write / update task."""

Plan = Generator[tuple[Graph, Any], GraphResult, Any]
"""A (sub-)plan: yields ``(graph, input)``, gets each GraphResult back."""


def progress_key(stage: str) -> str:
    """The checkpoint key of a completed stage: ``progress:<stage>``."""
    return f"progress:{stage}"


@dataclass
class TaskRun:
    """One run of a task: its inputs and what it has restored and done so far.

    Attributes:
        request: the parsed ``request.json``.
        model: how INFER is asked.
        options: the controller's options.
        checkpoints: checkpoint key -> committed content (restored, then added to).
        stages: stage lines done in this run or restored, in order.
        policy: the admission policy (``PreferencePolicy``) the controller chose.
    """

    request: TaskRequest
    model: ModelOptions
    options: TaskOptions
    checkpoints: dict[str, Any] = field(default_factory=dict)
    stages: list[dict[str, Any]] = field(default_factory=list)
    policy: Any = None

    @property
    def space(self) -> str:
        """The task's checkpoint space ``task:<taskId>``."""
        return TASK_SPACE_PREFIX + self.request.task_id

    def done(self, stage: str) -> Any | None:
        """The committed output of ``stage``, or ``None`` when it has not completed."""
        saved = self.checkpoints.get(progress_key(stage))
        return None if saved is None else saved.get("output")

    def say(self, line: str) -> None:
        """Report a progress line (``options.on_stage``), secret-shaped spans redacted."""
        if self.options.on_stage is not None:
            self.options.on_stage(redact(line))


def output_of(result: NodeResult[Any]) -> Any:
    """A NodeResult's output as JSON data (wire names)."""
    return to_jsonable_python(result.output, by_alias=True)


def require(done: GraphResult, node: str) -> Any:
    """The JSON output of ``node`` in a Graph that succeeded.

    Raises:
        NodeError: the node's own error (code and safe message) when it did not succeed,
            or the Graph's when the node did not run.
    """
    result = done.results.get(node)
    if result is not None and result.status == "success":
        return output_of(result)
    error = result.error if result is not None else done.error
    if error is None:
        raise NodeError(ErrorCode.GRAPH_BIND_FAILED, f"{done.graph}: node {node!r} did not run")
    raise NodeError(error.code, f"{done.graph}/{node}: {error.message}")


def restore(run: TaskRun, keys: list[str]) -> Plan:
    """Read the task's committed checkpoints with one MEMORY.GET in its space.

    Fills ``run.checkpoints`` (key -> content) and lists each restored stage.
    """
    step = graph("restore").node("get", "MEMORY.GET", [], lambda _: {"keys": keys}, space=run.space)
    done = yield step, None
    for item in require(done, "get"):
        run.checkpoints[item["key"]] = item["content"]
    for key in keys:
        saved = run.checkpoints.get(key)
        if key.startswith("progress:") and isinstance(saved, Mapping):
            run.stages.append({"stage": key.split(":", 1)[1], "restored": True})
            run.say(f"{key.split(':', 1)[1]}: restored from the checkpoint")
    return run.checkpoints


def save(run: TaskRun, key: str, content: Any, kind: str = "checkpoint") -> Plan:
    """Commit one checkpoint in the task space (MEMORY.WRITE), unless it is there already.

    Secret-shaped spans are redacted first (:func:`~ditto_worker.memory_tasks.
    secret_shapes.redact_json`): the checkpoint, and what the run keeps of it, hold only
    the redacted text (issue 35 item 2).

    Args:
        run: the task run.
        key: ``progress:<stage>``, ``candidate`` or ``report``.
        content: the checkpoint (JSON).
        kind: its ``metadata.kind``: ``checkpoint`` | ``candidate`` | ``report`` (never
            ``preference``: checkpoints are never embedded nor recalled).

    Raises:
        NodeError: the write failed (its code).
    """
    if key in run.checkpoints:
        return run.checkpoints[key]
    content = redact_json(content)
    memory = {
        "key": key,
        "content": content,
        "metadata": {"kind": kind, "taskId": run.request.task_id},
    }
    op = f"{run.request.task_id}:{key}"
    yield from mutate(f"save-{kind}", "MEMORY.WRITE", {"memories": [memory]}, op, run.space)
    run.checkpoints[key] = content
    return content


def mutate(name: str, node: str, body: dict[str, Any], op: str, space: str | None = None) -> Plan:
    """One mutation carrying the operation id ``op`` (MEM-RUN-7; and ``ifMetadata`` where
    ``body`` has it); asked once more without those guards when the store answers
    ``UNSUPPORTED`` (it cannot apply them; the caller's read-back still prevents one
    controller from applying its change twice).

    Returns:
        ``(records, guarded)``: the node's output and whether the guards were applied.

    Raises:
        NodeError: the mutation failed (its code: ``CONFLICT`` for a failed ``ifMetadata``
            or another input under ``op`` …).
    """
    step = graph(name).node("apply", node, [], lambda _: body, operation_id=op, space=space)
    done = yield step, None
    result = done.results["apply"]
    if result.error is not None and result.error.code == ErrorCode.UNSUPPORTED:
        plain = {"memories": [{k: v for k, v in entry.items() if k != "ifMetadata"}
                              for entry in body["memories"]]}  # fmt: skip
        retry = graph(f"{name}-unguarded").node("apply", node, [], lambda _: plain, space=space)
        return require((yield retry, None), "apply"), False
    return require(done, "apply"), True


def complete(run: TaskRun, stage: str, output: Any) -> Plan:
    """Commit stage ``stage`` as done (checkpoint ``progress:<stage>``) and report it."""
    yield from save(run, progress_key(stage), {"stage": stage, "output": output})
    run.stages.append({"stage": stage, "restored": False})
    run.say(f"{stage}: done (checkpoint {progress_key(stage)} committed)")
    return output


def ask(
    run: TaskRun, name: str, messages: list[dict[str, str]], schema: dict[str, Any] | None
) -> Plan:
    """One INFER.GENERATE call as a stage Graph; returns its ``json`` (with a schema) or
    ``text``.

    Raises:
        NodeError: the call failed (``INFER_UNAVAILABLE``, ``INFER_INVALID_OUTPUT`` …).
    """
    body: dict[str, Any] = {
        "messages": messages,
        "maxTokens": run.model.max_tokens,
        "temperature": run.model.temperature,
    }
    if schema is not None:
        body["responseSchema"] = schema
    step = graph(name).node(
        "infer", "INFER.GENERATE", [], lambda _: body, timeout=run.model.timeout_s
    )
    done = yield step, None
    output = require(done, "infer")
    return output.get("json") if schema is not None else output.get("text", "")
