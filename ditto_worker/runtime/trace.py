"""Tracing facts of a node call: which run and which Graph node it belongs to (MEM-GRAPH).

A Graph run (:mod:`ditto_worker.runtime.graph_runner`) gives every node call it makes a
*trace*: ``{"run_id", "graph", "graph_node"}`` — the run's id, the Graph's name and the
id of the Graph node (not the node type). The trace travels

* on the fleet as message headers (:data:`TRACE_HEADERS`: ``ditto_run_id``,
  ``ditto_graph``, ``ditto_graph_node``) next to ``ditto_deadline`` / ``ditto_scope``, and
  as the task's ``argsrepr`` (:func:`trace_repr`, e.g. ``run=4f1c… graph=memory-context
  node=search``), which is what Flower's task view shows as the task's arguments and what
  :class:`TraceLogFilter` adds to the worker's ``received`` / ``succeeded`` log lines;
* embedded, straight into the handler's ``NodeContext.headers``;
* into sub-calls (``ctx.invoke``), which carry their parent's trace.

A trace holds ids only, never input or output (memories and model text are personal
data; SPEC.md rules on logs). Values are cut to :data:`MAX_TRACE_CHARS` characters and
stripped of control characters and spaces. Nothing here imports Celery.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "GRAPH",
    "GRAPH_NODE",
    "MAX_TRACE_CHARS",
    "RUN_ID",
    "TRACE_HEADERS",
    "TraceLogFilter",
    "clean_trace",
    "install_log_trace",
    "trace_from_headers",
    "trace_headers",
    "trace_repr",
]

RUN_ID = "run_id"
"""Trace key: the id of the Graph run (a loop's Graphs: ``<loop run id>.<n>``)."""
GRAPH = "graph"
"""Trace key: the Graph's name (``graph(name)``)."""
GRAPH_NODE = "graph_node"
"""Trace key: the id of the Graph node the call runs (``.node(id, …)``)."""

TRACE_HEADERS = {RUN_ID: "ditto_run_id", GRAPH: "ditto_graph", GRAPH_NODE: "ditto_graph_node"}
"""Trace key -> message header name on the fleet."""

MAX_TRACE_CHARS = 128
"""Longest trace value kept, characters (longer values are cut)."""

_REPR_KEYS = ((RUN_ID, "run"), (GRAPH, "graph"), (GRAPH_NODE, "node"))
_REPR_PREFIX = "run="


_UNSAFE = re.compile(r"[\s]")


def _clean(value: Any) -> str:
    text = str(value)[:MAX_TRACE_CHARS]
    if text.isprintable() and not _UNSAFE.search(text):
        return text  # the usual case: ids
    return "".join(c if c.isprintable() and not c.isspace() else "_" for c in text)


def clean_trace(trace: Mapping[str, Any] | None) -> dict[str, str]:
    """The known trace keys of ``trace`` with cleaned string values (unknown keys and
    empty values dropped); ``{}`` for ``None``."""
    if not trace:
        return {}
    return {key: _clean(trace[key]) for key in TRACE_HEADERS if trace.get(key) not in (None, "")}


def trace_headers(trace: Mapping[str, str]) -> dict[str, str]:
    """Message headers of a clean trace (``{"ditto_run_id": …, …}``)."""
    return {TRACE_HEADERS[key]: value for key, value in trace.items() if key in TRACE_HEADERS}


def trace_from_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The trace carried by a message's headers (``{}`` when it has none)."""
    if not headers:
        return {}
    return clean_trace({key: headers.get(name) for key, name in TRACE_HEADERS.items()})


def trace_repr(trace: Mapping[str, str]) -> str:
    """``run=<id> graph=<name> node=<id>`` (keys present only): the task's ``argsrepr``."""
    return " ".join(f"{label}={trace[key]}" for key, label in _REPR_KEYS if key in trace)


class TraceLogFilter(logging.Filter):
    """Adds a traced task's run and Graph node to Celery's task log lines.

    Celery logs ``Task MEMORY.GET[<id>] received`` (``celery.worker.strategy``) and
    ``… succeeded in 0.01s: …`` (``celery.app.trace``) with the task's ``argsrepr`` in the
    record's arguments but not in the line; for a call sent with a trace (its ``argsrepr``
    is :func:`trace_repr`) this filter appends ``[run=… graph=… node=…]``. Other records
    pass unchanged; it never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping) and isinstance(record.msg, str):
            shown = args.get("args")
            if (
                isinstance(shown, str)
                and shown.startswith(_REPR_PREFIX)
                and "%(args)" not in (record.msg)
            ):
                record.msg = f"{record.msg} [%(args)s]"
        return True


_TASK_LOGGERS = ("celery.worker.strategy", "celery.app.trace")


def install_log_trace() -> None:
    """Attach one :class:`TraceLogFilter` to Celery's task loggers (idempotent)."""
    for name in _TASK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TraceLogFilter) for f in logger.filters):
            logger.addFilter(TraceLogFilter())
