"""What a worked task takes and gives: the request file, the host's options, the outcome.

Three sources, kept apart (the seed, memory-capabilities "Run": "Application callers …
pass controller-owned tenant/user/permission"; SPEC.md MEM-TASK-2/3):

* :class:`TaskRequest` — ``request.json`` of a task directory: what to do (task id,
  kind, backend, the project whose progress is reported, the conversation to learn
  from). It never names a tenant, a user or a permission: a request file that tries is
  ``INVALID_INPUT``.
* :class:`TaskOptions` — the controller's: tenant, user, storage permission, where the
  artifact goes, deadline and cancellation. Only the host builds these.
* :class:`ModelOptions` — how INFER is asked (reply tokens, temperature, per-call
  timeout): the ``model`` half of ``run(runtime, {request, model}, options)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.runtime.cancel import CancelToken

__all__ = [
    "BACKENDS",
    "LANGUAGE_NAMES",
    "TASK_KINDS",
    "Backend",
    "ConversationTurn",
    "ModelOptions",
    "ProjectStage",
    "TaskInputs",
    "TaskKind",
    "TaskOptions",
    "TaskOutcome",
    "TaskRequest",
    "parse_request",
]

TaskKind = Literal["search", "write", "update", "task-state"]
TASK_KINDS: Final = ("search", "write", "update", "task-state")
"""The four worked tasks of the seed's table."""
Backend = Literal["sqlite", "postgres", "qdrant"]
BACKENDS: Final = ("sqlite", "postgres", "qdrant")
"""The persistent databases a task runs on (the seed's ``--backend``)."""

LANGUAGE_NAMES: Final = {
    "en": "English",
    "zh": "Chinese",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "ja": "Japanese",
}
"""Language codes (ISO 639-1) a progress message can be asked in -> their English names."""

_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


class ConversationTurn(_Model):
    """One message of the conversation a ``write`` / ``update`` task learns from."""

    role: Literal["system", "user", "assistant", "tool"] = Field(
        description="Who said it; only ``user`` turns can state a preference."
    )
    content: Annotated[str, Field(max_length=4000)] = Field(description="The text.")


class ProjectStage(_Model):
    """One stage of the project whose progress the message reports."""

    name: Annotated[str, Field(min_length=1, max_length=80)] = Field(description="Stage name.")
    status: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="Where the stage stands, one short phrase (``done``, ``60% built``)."
    )


class TaskRequest(_Model):
    """``request.json``: one task, as data (no identity, no permission).

    Raises (through :func:`parse_request`):
        NodeError: ``INVALID_INPUT`` naming the field.
    """

    task_id: str = Field(
        description="1-128 characters [A-Za-z0-9_.-], starting with a letter or digit; "
        "names the checkpoint space task:<taskId> and artifacts/<taskId>.json."
    )
    kind: TaskKind = Field(description="search | write | update | task-state.")
    backend: Backend = Field(default="sqlite", description="sqlite | postgres | qdrant.")
    project: Annotated[str, Field(min_length=1, max_length=120)] = Field(
        default="Atlas", description="The project the progress message is about."
    )
    stages: Annotated[list[ProjectStage], Field(min_length=1, max_length=12)] = Field(
        default_factory=lambda: [
            ProjectStage(name="design", status="done"),
            ProjectStage(name="build", status="60% done"),
            ProjectStage(name="tests", status="not started"),
        ],
        description="The project's stages, in order.",
    )
    conversation: Annotated[list[ConversationTurn], Field(max_length=50)] = Field(
        default_factory=list,
        description="Messages to learn a preference from (write / update), in order.",
    )
    created_at: str | None = Field(default=None, description="ISO-8601 time, informational.")

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str) -> str:
        if not _TASK_ID.fullmatch(value):
            raise ValueError("must be 1-128 characters [A-Za-z0-9_.-], starting alphanumeric")
        return value


def parse_request(raw: Any) -> TaskRequest:
    """A :class:`TaskRequest` from JSON data (``request.json``).

    Raises:
        NodeError: ``INVALID_INPUT`` naming the first bad field; a request that names a
            tenant, user, scope or permission is refused the same way (those are the
            controller's, never the file's).
    """
    if isinstance(raw, TaskRequest):
        return raw
    try:
        return TaskRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        raise NodeError(
            ErrorCode.INVALID_INPUT, f"Invalid input: request.{where}: {first['msg']}"
        ) from None


class ModelOptions(_Model):
    """How the task asks INFER.GENERATE (the ``model`` of ``{request, model}``)."""

    max_tokens: Annotated[int, Field(ge=8, le=1024)] = Field(
        default=96, description="Reply tokens per INFER call (small: the local model is slow)."
    )
    temperature: Annotated[float, Field(ge=0, le=2)] = Field(
        default=0.0, description="Sampling temperature (0: the most likely reply)."
    )
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=180.0,
        description="Deadline of each INFER call, seconds (the Graph node's timeout; a "
        "local model on a loaded 2-core machine took up to 60 s per call).",
    )
    attempts: Annotated[int, Field(ge=1, le=5)] = Field(
        default=3,
        description="INFER calls a message may take before its language check fails the "
        "task (each counts against the loop's 1,024-Graph budget).",
    )


@dataclass(frozen=True)
class TaskInputs:
    """``{request, model}`` of ``run(runtime, {request, model}, options)``."""

    request: TaskRequest
    model: ModelOptions = field(default_factory=ModelOptions)

    @classmethod
    def of(cls, value: TaskInputs | Mapping[str, Any]) -> TaskInputs:
        """From a ``TaskInputs`` or a mapping ``{"request": …, "model": …}``.

        Raises:
            NodeError: ``INVALID_INPUT`` naming the field.
        """
        if isinstance(value, TaskInputs):
            return value
        request = parse_request(value.get("request"))
        model = value.get("model") or ModelOptions()
        if not isinstance(model, ModelOptions):
            try:
                model = ModelOptions.model_validate(model)
            except ValidationError as exc:
                loc = ".".join(str(p) for p in exc.errors()[0]["loc"])
                raise NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: model.{loc}") from None
        return cls(request, model)


@dataclass(frozen=True)
class TaskOptions:
    """The controller's side of a task: never read from the request or the model.

    Attributes:
        tenant: the trusted tenant id (the host authenticated it).
        user: the trusted user id within the tenant.
        artifacts_dir: where ``<taskId>.json`` is published.
        allow_write: the host's permission to store preferences (``write`` / ``update``);
            without it the task calls no model and writes nothing.
        timeout_s: seconds for the whole task (the loop's deadline), or ``None``.
        cancel: cancelling it cancels the Graph in flight; the plan stops.
        on_stage: called with one line per stage as it completes (the CLI prints it).
        stop_after_checkpoint: end the task right after its first progress checkpoint
            commits (``--checkpoint``: a resumable task directory to continue later).
    """

    tenant: str
    user: str
    artifacts_dir: Path
    allow_write: bool = False
    timeout_s: float | None = None
    cancel: CancelToken | None = None
    on_stage: Callable[[str], None] | None = None
    stop_after_checkpoint: bool = False


class TaskOutcome(BaseModel):
    """What ``run_*`` returns."""

    model_config = ConfigDict(frozen=True)

    task_id: str = Field(description="The request's task id.")
    kind: TaskKind = Field(description="The task kind.")
    status: Literal["success", "failed", "cancelled", "timeout", "checkpointed"] = Field(
        description="The loop's status; ``checkpointed`` when it stopped after its first "
        "checkpoint on purpose (resume it to finish)."
    )
    artifact_path: str | None = Field(default=None, description="The published artifact.")
    artifact: dict[str, Any] | None = Field(default=None, description="Its content.")
    error: dict[str, str] | None = Field(default=None, description="``{code, message}``.")
    graphs: int = Field(description="Graphs the loop ran (of its 1,024 budget).")
