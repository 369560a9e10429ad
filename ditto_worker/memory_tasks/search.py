"""The ``search`` task: recall communication preferences, load the working context, write
the progress message in the remembered language and style, citing memory id and version.

The seed's table (memory-capabilities): "search.ts — Recall communication preferences
with MEMORY.SEARCH, load Redis context, infer — Apply the remembered language/style and
cite the memory ID/version" (SPEC.md MEM-TASK-1/2/5). Stages, each committed as a
checkpoint in ``task:<taskId>``:

1. ``recall`` — MEMORY.SEARCH with the task's filter ``{kind: preference}`` and
   CONTEXT.LOAD; a cache miss is restored from the database
   (:func:`~ditto_worker.memory_tasks.preferences.recall`);
2. ``message`` — INFER.GENERATE in the remembered language, checked in code
   (:func:`~ditto_worker.memory_tasks.preferences.progress_message`).

With no preference stored the message is in English and cites nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ditto_worker.memory_tasks.contracts import TaskInputs, TaskOptions, TaskOutcome
from ditto_worker.memory_tasks.preferences import progress_message, recall
from ditto_worker.memory_tasks.runner import (
    TaskPlan,
    base_artifact,
    run_task,
    stop_if_asked,
    task_loop,
)
from ditto_worker.memory_tasks.steps import Plan, TaskRun, complete

__all__ = ["SEARCH_STAGES", "message_stage", "run_search", "run_search_loop"]

SEARCH_STAGES = ["recall", "message"]
"""The checkpointed stages of ``search``."""


def message_stage(run: TaskRun, memories: list[dict[str, Any]]) -> Plan:
    """The ``message`` stage: restored, or inferred and committed."""
    done = run.done("message")
    if isinstance(done, Mapping):
        return done
    made = yield from progress_message(run, memories)
    yield from complete(run, "message", made)
    return made


def _body(run: TaskRun) -> Plan:
    recalled = run.done("recall")
    if not isinstance(recalled, Mapping):
        memories, context = yield from recall(run, run.policy.fields)
        recalled = {"memories": memories, "context": context}
        yield from complete(run, "recall", recalled)
        stop_if_asked(run)
    made = yield from message_stage(run, recalled["memories"])
    artifact = base_artifact(run)
    artifact.update(made)
    artifact["memories"] = recalled["memories"]
    artifact["context"] = recalled["context"]
    return artifact


def run_search(
    runtime: Any,
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskOutcome:
    """Run the ``search`` task (see the module docstring).

    Args:
        runtime: a runtime serving MEMORY, CONTEXT and INFER.GENERATE.
        inputs: ``{request, model}``; ``request.kind`` must be ``search``.
        options: the controller's tenant, user, artifacts folder, deadline, cancellation.
        policy: the policy whose fields are recalled (as for ``run_write``).

    Returns:
        The :class:`TaskOutcome`; its artifact's ``message`` ends with ``(memory <id>
        v<version>)`` for every preference applied.
    """
    return run_task(runtime, "search", inputs, options, _body, lambda _: SEARCH_STAGES, policy)


def run_search_loop(
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskPlan:
    """The ``search`` task as a plan for the host's own ``runtime.loop()`` — the seed's
    ``runSearchLoop`` (memory-capabilities, "Graph / Loop composition"); :func:`run_search`
    runs exactly this plan in a loop of its own.

    Join it with ``yield from`` in a plan run with ``scope=task_scope(options)``; its
    Graphs count against that loop's budget. The ``recall`` Graph runs MEMORY.SEARCH and
    CONTEXT.LOAD side by side (no dependency between them); INFER comes in a later Graph,
    after both answered and the recall checkpoint committed.

    Args:
        inputs, options, policy: as for :func:`run_search` (``options.timeout_s`` and
            ``options.cancel`` are the host loop's to set).

    Returns:
        A generator yielding ``(graph, input)`` that returns the :class:`TaskOutcome`
        (a node failure is a ``failed`` outcome, not an exception).
    """
    return task_loop("search", inputs, options, _body, lambda _: SEARCH_STAGES, policy)
