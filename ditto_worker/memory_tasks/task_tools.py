"""The worked ``search`` and ``write`` tasks as tools of an agent host (issue 33 item 3).

Framework-free (no ``mcp`` import; :mod:`ditto_worker.integrations.mcp` turns a
:class:`TaskTool` into an MCP tool, ``ditto-worker mcp`` and the gateway's ``/mcp`` offer
them). Each tool takes ``{request, model}`` — the task's own inputs (:class:`TaskRequest`
with ``kind`` fixed and ``taskId`` optional, :class:`ModelOptions`) — and answers the
task's outcome (:class:`TaskToolOutcome`: status, error ``{code, message}``, the artifact).

They are offered only when a model is configured (:func:`task_tools_offered`): the
runtime serves every node a task calls and ``workers.infer`` names an endpoint
(``baseUrl`` / ``DITTO_WORKER_INFER_BASE_URL``) or a GGUF file (``local.modelPath``).
The tenant and user come from the caller's :data:`Trusted` (the operator's ``--scope``,
the gateway's verified token), never from the arguments: the input models take no other
field, so a ``tenant`` or ``scope`` argument is ``INVALID_INPUT`` and nothing runs. What a
``write`` task stores is decided by the task's code policy, not by the model.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory.checks import describe
from ditto_worker.memory_tasks.contracts import (
    ModelOptions,
    TaskInputs,
    TaskKind,
    TaskOptions,
    TaskOutcome,
    TaskRequest,
)
from ditto_worker.memory_tasks.revise import run_write_loop
from ditto_worker.memory_tasks.runner import TaskPlan, task_scope
from ditto_worker.memory_tasks.search import run_search_loop
from ditto_worker.scope import Scope

__all__ = [
    "TASK_TOOLS",
    "TASK_TOOL_NODES",
    "SearchToolInput",
    "SearchToolRequest",
    "TaskTool",
    "TaskToolOutcome",
    "Trusted",
    "WriteToolInput",
    "WriteToolRequest",
    "model_configured",
    "run_task_tool",
    "scope_folder",
    "task_tools",
    "task_tools_offered",
]

logger = logging.getLogger(__name__)

TASK_TOOLS: Final[dict[str, TaskKind]] = {
    "memory_task_search": "search",
    "memory_task_write": "write",
}
"""Tool name -> the worked task it runs."""

TASK_TOOL_NODES: Final = (
    "MEMORY.GET",
    "MEMORY.SEARCH",
    "MEMORY.WRITE",
    "MEMORY.UPDATE",
    "CONTEXT.LOAD",
    "CONTEXT.UPDATE",
    "INFER.GENERATE",
)
"""Every node the two tasks may call (checkpoints are MEMORY.GET / MEMORY.WRITE in the
space ``task:<taskId>``); a runtime lacking one offers no task tool, a gateway token must
be granted all of them."""

Allows = Callable[[str, str], bool]
"""``allows(node, space)``: whether the caller may use ``node`` in ``space``."""
Trusted = Callable[[], "tuple[Scope, Allows | None]"]
"""Called once per tool call: the trusted scope (tenant, user) it acts for and the
caller's grants (``None``: every node and space). Raises :class:`NodeError` when there
is no trusted caller (``UNAUTHENTICATED``)."""


def _new_task_id() -> str:
    return f"mcp-{uuid.uuid4().hex[:16]}"


_TASK_ID = (
    "The task id (1-128 characters [A-Za-z0-9_.-]): names its checkpoints and artifact. "
    "Omitted: a new task per call. A finished task's id given again answers its committed "
    "artifact without inference; an unfinished one resumes."
)


class SearchToolRequest(TaskRequest):
    """The ``request`` of ``memory_task_search``: a ``search`` :class:`TaskRequest`."""

    task_id: str = Field(default_factory=_new_task_id, description=_TASK_ID)
    kind: Literal["search"] = Field(default="search", description="Always ``search``.")


class WriteToolRequest(TaskRequest):
    """The ``request`` of ``memory_task_write``: a ``write`` :class:`TaskRequest`; its
    ``conversation`` holds the messages a preference may be learned from."""

    task_id: str = Field(default_factory=_new_task_id, description=_TASK_ID)
    kind: Literal["write"] = Field(default="write", description="Always ``write``.")


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


class SearchToolInput(_Model):
    """Arguments of ``memory_task_search``: ``{request, model}``, both optional."""

    request: SearchToolRequest = Field(
        default_factory=SearchToolRequest,
        description="The task: project and stages to report on (defaults: project Atlas).",
    )
    model: ModelOptions = Field(default_factory=ModelOptions, description="How INFER is asked.")


class WriteToolInput(_Model):
    """Arguments of ``memory_task_write``: ``{request, model}``."""

    request: WriteToolRequest = Field(
        description="The task: the conversation to learn a preference from (only a user "
        "turn's exact words can state one)."
    )
    model: ModelOptions = Field(default_factory=ModelOptions, description="How INFER is asked.")


class TaskToolOutcome(_Model):
    """What a task tool answers (its ``structuredContent``): the :class:`TaskOutcome`
    without the server's file path."""

    task_id: str = Field(description="The task id ('' when the arguments were invalid).")
    kind: TaskKind = Field(description="search | write.")
    status: Literal["success", "failed", "cancelled", "timeout", "checkpointed"] = Field(
        description="The task's status."
    )
    artifact: dict[str, Any] | None = Field(
        default=None, description="The published artifact (artifact.schema.json), on success."
    )
    error: dict[str, str] | None = Field(
        default=None, description="``{code, message}`` when the status is not success."
    )
    graphs: int = Field(description="Graphs the task ran (of its loop's 1,024 budget).")

    @classmethod
    def of(cls, outcome: TaskOutcome) -> TaskToolOutcome:
        """The tool's answer of a task's outcome."""
        return cls(
            task_id=outcome.task_id,
            kind=outcome.kind,
            status=outcome.status,
            artifact=outcome.artifact,
            error=outcome.error,
            graphs=outcome.graphs,
        )

    def wire(self) -> dict[str, Any]:
        """Its JSON (camelCase names)."""
        return self.model_dump(mode="json", by_alias=True)


_INPUTS: Final[dict[str, type[SearchToolInput] | type[WriteToolInput]]] = {
    "memory_task_search": SearchToolInput,
    "memory_task_write": WriteToolInput,
}
_DESCRIPTIONS: Final = {
    "memory_task_search": "Write the project's progress message in the user's remembered "
    "language and style: recalls the stored preferences (MEMORY.SEARCH), loads the working "
    "context, asks the model, checks the language in code and cites each preference used "
    "as (memory <id> v<version>). Answers the task's artifact.",
    "memory_task_write": "Learn a communication preference (language, style) from the "
    "conversation and store it: the model proposes values with exact quotes of a user "
    "turn; code decides what is admitted (MEMORY.WRITE). Answers the task's artifact.",
}


def model_configured(config: Any) -> bool:
    """True when ``config`` (a ``RuntimeConfig`` or ``None``) names a model for INFER:
    ``workers.infer.baseUrl`` (env ``DITTO_WORKER_INFER_BASE_URL``) or
    ``workers.infer.local.modelPath``. The packaged default model does not count: it is
    started on the first call only and takes minutes per call on a small machine."""
    infer = getattr(config, "infer_worker", None)
    return infer is not None and bool(infer.base_url or infer.local.model_path)


def task_tools_offered(runtime: Any) -> bool:
    """True when ``runtime`` serves every node of :data:`TASK_TOOL_NODES` and its config
    names a model (:func:`model_configured`)."""
    return model_configured(runtime.config) and set(TASK_TOOL_NODES) <= set(runtime.nodes)


def _failed(kind: TaskKind, task_id: str, code: str, message: str) -> TaskOutcome:
    return TaskOutcome(
        task_id=task_id,
        kind=kind,
        status="failed",
        graphs=0,
        error={"code": code, "message": message},
    )


def _inputs(name: str, arguments: Any) -> TaskInputs:
    """The task's inputs from a tool's arguments.

    Raises:
        NodeError: ``INVALID_INPUT`` naming the bad fields (never a value), worded as
            the memory nodes word it (:func:`ditto_worker.memory.checks.describe`).
    """
    try:
        parsed = _INPUTS[name].model_validate(arguments if arguments is not None else {})
    except ValidationError as exc:
        raise NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: {describe(exc)}") from None
    return TaskInputs(parsed.request, parsed.model)


def _denied(allows: Allows | None, task_id: str) -> str | None:
    """The first node or space the caller may not use, else ``None``."""
    if allows is None:
        return None
    for node in TASK_TOOL_NODES:
        if not allows(node, "memory"):
            return f"this token may not call {node}"
    for node in ("MEMORY.GET", "MEMORY.WRITE"):
        if not allows(node, f"task:{task_id}"):
            return f"this token may not use the space 'task:{task_id}'"
    return None


def scope_folder(scope: Scope) -> str:
    """The artifacts folder of one (tenant, user): 24 hex digits of the SHA-256 of
    ``tenant NUL user`` (no id reaches a path; two scopes never share a folder)."""
    return hashlib.sha256(f"{scope.tenant}\0{scope.user}".encode()).hexdigest()[:24]


async def run_task_tool(
    runtime: Any,
    name: str,
    arguments: Any,
    scope: Scope,
    artifacts_root: Path,
    *,
    allows: Allows | None = None,
    timeout_s: float | None = None,
) -> TaskOutcome:
    """Run the task of tool ``name`` for the trusted ``scope``: its plan
    (``run_<task>_loop``) in one ``runtime.aloop`` in ``task_scope``.

    Args:
        runtime: serving :data:`TASK_TOOL_NODES` (embedded or a fleet).
        name: a key of :data:`TASK_TOOLS`.
        arguments: the tool's arguments (``{request, model}``).
        scope: the trusted tenant and user (its space is not used).
        artifacts_root: the artifact goes to ``<root>/<digest of tenant and user>/<taskId>.json``.
        allows: the caller's grants (``None``: all); a task needs every node of
            :data:`TASK_TOOL_NODES` in ``memory`` and MEMORY.GET/WRITE in ``task:<taskId>``.
        timeout_s: seconds for the whole task; ``None``: each call's own deadline only.

    Returns:
        The :class:`TaskOutcome`: ``failed`` with ``INVALID_INPUT`` (bad arguments) or
        ``PERMISSION_DENIED`` (a grant missing) before anything runs; else the task's own
        outcome (a node's code, ``timeout``, ``MEMORY_BACKEND_ERROR`` when the artifact
        could not be published).
    """
    kind = TASK_TOOLS[name]
    try:
        inputs = _inputs(name, arguments)
    except NodeError as exc:
        return _failed(kind, "", exc.code, exc.safe_message)
    task_id = inputs.request.task_id
    denied = _denied(allows, task_id)
    if denied is not None:
        return _failed(kind, task_id, ErrorCode.PERMISSION_DENIED, denied)
    # the host's permission to store preferences: a caller that may call every node of
    # the task (the operator's server, a token granted MEMORY.WRITE) has it
    options = TaskOptions(
        scope.tenant, scope.user, artifacts_root / scope_folder(scope), allow_write=True
    )
    plan: TaskPlan = (run_search_loop if kind == "search" else run_write_loop)(inputs, options)
    try:
        result = await runtime.aloop(
            lambda _: plan,
            None,
            scope=task_scope(options),
            timeout=timeout_s,
            run_id=f"mcp-{task_id}-{uuid.uuid4().hex[:8]}",
        )
    except Exception as exc:  # the plan raised (the artifact could not be written …)
        logger.warning("task tool %s failed: %s", name, type(exc).__name__)
        return _failed(
            kind, task_id, ErrorCode.MEMORY_BACKEND_ERROR, f"the task failed ({type(exc).__name__})"
        )
    if result.status == "success":
        outcome: TaskOutcome = result.output
        return outcome
    error = result.error
    fields = {} if error is None else {"error": {"code": error.code, "message": error.message}}
    return TaskOutcome(
        task_id=task_id, kind=kind, status=result.status, graphs=len(result.graphs), **fields
    )


@dataclass(frozen=True)
class TaskTool:
    """One task as a host's tool: what :func:`ditto_worker.integrations.mcp.create_mcp_server`
    takes as an extra tool."""

    name: str
    title: str
    description: str
    input: type[BaseModel]
    output: type[BaseModel]
    read_only: bool
    call: Callable[[Any], Awaitable[tuple[dict[str, Any], bool]]]
    """``call(arguments) -> (structured content, is_error)``."""


def task_tools(
    runtime: Any,
    trusted: Trusted,
    artifacts_root: Path,
    *,
    timeout_s: float | None = None,
    on_outcome: Callable[[str, TaskOutcome], None] | None = None,
) -> list[TaskTool]:
    """The two task tools over ``runtime``, each call acting for ``trusted()``.

    Args:
        runtime, artifacts_root, timeout_s: as for :func:`run_task_tool`.
        trusted: the trusted scope and grants of a call (:data:`Trusted`).
        on_outcome: called with the tool name and each outcome (the gateway's metrics).
    """

    def make(name: str) -> TaskTool:
        async def call(arguments: Any) -> tuple[dict[str, Any], bool]:
            try:
                scope, allows = trusted()
            except NodeError as exc:
                outcome = _failed(TASK_TOOLS[name], "", exc.code, exc.safe_message)
            else:
                outcome = await run_task_tool(
                    runtime,
                    name,
                    arguments,
                    scope,
                    artifacts_root,
                    allows=allows,
                    timeout_s=timeout_s,
                )
            if on_outcome is not None:
                on_outcome(name, outcome)
            return TaskToolOutcome.of(outcome).wire(), outcome.status != "success"

        return TaskTool(
            name=name,
            title=f"{TASK_TOOLS[name]} task",
            description=_DESCRIPTIONS[name],
            input=_INPUTS[name],
            output=TaskToolOutcome,
            read_only=False,
            call=call,
        )

    return [make(name) for name in TASK_TOOLS]
