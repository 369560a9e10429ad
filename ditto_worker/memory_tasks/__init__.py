"""The four worked memory tasks: ``search``, ``write``, ``update``, ``task-state``.

The user's second document (``memory-capabilities``; SPEC.md MEM-TASK): each task is
``run_<task>(runtime, {request, model}, options)``, one ``runtime.loop()`` whose plan
yields stage Graphs of public worker nodes only (MEMORY.*, CONTEXT.*, INFER.GENERATE),
producing ``artifacts/<taskId>.json``. The same plan is exported as
``run_<task>_loop(inputs, options)`` (the seed's ``run*Loop``) for a host to run several
tasks inside its own ``runtime.loop(plan, input, scope=task_scope(options))``, sharing its
1,024-Graph budget. The tenant, user and storage permission are the
controller's (:class:`TaskOptions`), never the request file's or the model's;
:func:`open_memory_storage` builds the MEMORY worker over SQLite, PostgreSQL or Qdrant.

Importing this package connects to nothing, starts no model and prints nothing
(MEM-RT-5). The name is ``memory_tasks``, not ``tasks``: Celery users read a ``tasks``
module as Celery task definitions. User guide: ``docs/memory-tasks.md``.
"""

from __future__ import annotations

from ditto_worker.memory_tasks.artifact import (
    ARTIFACT_SCHEMA_PATH,
    artifact_schema,
    check_artifact,
    publish_artifact,
)
from ditto_worker.memory_tasks.contracts import (
    BACKENDS,
    TASK_KINDS,
    ConversationTurn,
    ModelOptions,
    ProjectStage,
    TaskInputs,
    TaskOptions,
    TaskOutcome,
    TaskRequest,
    parse_request,
)
from ditto_worker.memory_tasks.policy_config import load_task_policy, policy_from_config
from ditto_worker.memory_tasks.revise import run_update, run_update_loop, run_write, run_write_loop
from ditto_worker.memory_tasks.runner import TaskPlan, task_scope
from ditto_worker.memory_tasks.search import run_search, run_search_loop
from ditto_worker.memory_tasks.storage import MemoryStorage, open_memory_storage
from ditto_worker.memory_tasks.task_state import run_task_state, run_task_state_loop

__all__ = [
    "ARTIFACT_SCHEMA_PATH",
    "BACKENDS",
    "TASK_KINDS",
    "ConversationTurn",
    "MemoryStorage",
    "ModelOptions",
    "ProjectStage",
    "TaskInputs",
    "TaskOptions",
    "TaskOutcome",
    "TaskPlan",
    "TaskRequest",
    "artifact_schema",
    "check_artifact",
    "load_task_policy",
    "open_memory_storage",
    "parse_request",
    "policy_from_config",
    "publish_artifact",
    "run_search",
    "run_search_loop",
    "run_task_state",
    "run_task_state_loop",
    "run_update",
    "run_update_loop",
    "run_write",
    "run_write_loop",
    "task_scope",
]
