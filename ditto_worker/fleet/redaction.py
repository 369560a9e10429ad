"""No memory content in logs, Celery events, Flower or ``celery inspect`` (issue 14 item 2).

Node inputs and outputs are personal data (memories, queries, filter values, model text).
By default the fleet shows only ids, node, status, code, sizes and timings; the setting
``fleet.logContent: true`` (env ``DITTO_LOG_CONTENT=true``; for debugging only) shows them
as Celery would. Where Celery puts content, and what replaces it:

* task arguments (``task-sent`` / ``task-received`` events, Flower's args/kwargs, the
  request's repr): the client sends ``argsrepr`` / ``kwargsrepr`` (:func:`args_repr`), and
  a worker's request overrides them again (:data:`INPUT_REPR` with the body's size), so a
  message sent by another tool is redacted too;
* ``celery inspect active|reserved|query_task`` (``Request.info``): the redacted reprs;
* the task's return value (the ``succeeded in 0.01s: …`` log line and the
  ``task-succeeded`` event's ``result``, Flower's result): a task returns a
  :class:`Reply` whose ``repr`` is a summary (``<NodeResult MEMORY.GET success>``); it
  serializes to the NodeResult's wire JSON through kombu's JSON type registry, so the
  result backend stores the whole NodeResult as before;
* Celery's DEBUG line ``TaskPool: Apply …`` (the whole message) and the consumer's
  reports of unregistered, invalid or undecodable messages (the body): rewritten by
  :class:`RedactingFilter` on those loggers.

Source: Celery ``app/amqp.py`` (argsrepr), ``app/trace.py`` (``LOG_SUCCESS``),
``worker/request.py`` (``info``, ``task-succeeded``), ``concurrency/base.py``,
``worker/consumer/consumer.py`` (``dump_body``); kombu ``utils/json.py``
(``register_type``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kombu.utils.json import register_type

from ditto_worker.contracts import NodeResult, to_wire

__all__ = [
    "INPUT_REPR",
    "REDACTED_LOGGERS",
    "RedactingFilter",
    "Reply",
    "args_repr",
    "install_redaction",
    "input_repr",
]

INPUT_REPR = "{'input': <redacted>}"
"""``kwargsrepr`` of a call whose size is not known (what the client sends)."""

REDACTED_LOGGERS = ("celery.pool", "celery.worker.consumer.consumer")
"""Loggers whose records can carry a message body; :class:`RedactingFilter` sits on each."""


def args_repr(log_content: bool) -> dict[str, str]:
    """``send_task`` options that keep a call's input out of events (empty when
    ``log_content``: Celery's own reprs)."""
    return {} if log_content else {"argsrepr": "()", "kwargsrepr": INPUT_REPR}


def input_repr(size: int | None) -> str:
    """``kwargsrepr`` of a received call: its body's size only (``None``: not known)."""
    if size is None:
        return "{'input': <redacted, message size unknown>}"
    return f"{{'input': <redacted, message {size} bytes>}}"


class Reply:
    """A task's return value: the NodeResult, shown as a summary.

    Celery logs and sends ``repr(return value)``; kombu's JSON encoder stores
    :attr:`wire` (registered below), or :mod:`ditto_worker.fleet.replies` encodes the
    model in one pass, so the result backend and the client see the plain NodeResult JSON.

    Args:
        result: the NodeResult, or its wire JSON (``executionId``, ``node``, ``status`` …).
        show: ``True``: ``repr`` is the whole JSON (``fleet.logContent``).
    """

    __slots__ = ("_wire", "result", "show")

    def __init__(self, result: NodeResult[Any] | Mapping[str, Any], show: bool = False) -> None:
        self.result = result
        self.show = show
        self._wire: Mapping[str, Any] | None = None if isinstance(result, NodeResult) else result

    @property
    def wire(self) -> Mapping[str, Any]:
        """The NodeResult wire JSON (made from the model on first use)."""
        if self._wire is None:
            assert isinstance(self.result, NodeResult)
            self._wire = to_wire(self.result)
        return self._wire

    def __repr__(self) -> str:
        if self.show:
            return repr(self.wire)
        if isinstance(self.result, NodeResult):
            error = self.result.error
            code = f" {error.code}" if error is not None else ""
            return f"<NodeResult {self.result.node} {self.result.status}{code}>"
        error = self.wire.get("error")
        code = f" {error.get('code')}" if isinstance(error, Mapping) else ""
        return f"<NodeResult {self.wire.get('node')} {self.wire.get('status')}{code}>"


register_type(Reply, None, lambda reply: reply.wire)


_BODY_TEMPLATES = {
    "Received unregistered task": "Received unregistered task of type %s; message discarded "
    "(body not logged: fleet.logContent is off)",
    "Received invalid task message": "Received invalid task message: %s; message discarded "
    "(body not logged: fleet.logContent is off)",
    "Can't decode message body": "Can't decode message body: %s (body not logged: "
    "fleet.logContent is off)",
    "Received and deleted unknown message": "Received and deleted unknown message (body "
    "not logged: fleet.logContent is off)",
}


class RedactingFilter(logging.Filter):
    """Rewrites the records of :data:`REDACTED_LOGGERS` that carry a message body."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("TaskPool: Apply"):
            record.msg, record.args = "TaskPool: Apply (arguments not logged)", ()
            return True
        for start, replacement in _BODY_TEMPLATES.items():
            if message.startswith(start):
                first = record.args[0] if isinstance(record.args, tuple) and record.args else ""
                shown = (str(first)[:200],) if "%s" in replacement else ()
                record.msg, record.args = replacement, shown
                record.exc_info, record.exc_text = None, None
                return True
        return True


_FILTER = RedactingFilter()


def install_redaction(log_content: bool) -> None:
    """Put :class:`RedactingFilter` on the loggers that can log a message body (or take it
    off when ``log_content``). Idempotent."""
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if log_content:
            logger.removeFilter(_FILTER)
        elif _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
