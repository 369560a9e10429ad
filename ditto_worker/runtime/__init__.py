"""The runtime every worker kind runs on (SPEC.md MEM-RT): definitions and NodeContext.

Imports no Celery (MEM-RT-5).
"""

from __future__ import annotations

from ditto_worker.runtime.context import NodeContext, SubInvoke
from ditto_worker.runtime.definition import (
    Handler,
    KindCodes,
    NodeSpec,
    WorkerDefinition,
    queue_of,
)

__all__ = [
    "Handler",
    "KindCodes",
    "NodeContext",
    "NodeSpec",
    "SubInvoke",
    "WorkerDefinition",
    "queue_of",
]
