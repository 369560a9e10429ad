"""The one envelope around every node call, embedded or on the fleet (MEM-RT-2/4).

:func:`run_node` is what "a node call" means, wherever it runs: the embedded runtime
calls it in a pool thread, a Celery task calls it in a worker process. In order:

1. the trusted scope is resolved against the definition's own binding
   (:func:`ditto_worker.scope.resolve_scope`) -> ``PERMISSION_DENIED``;
2. a call stopped before it started is ``cancelled`` / ``timeout`` (the kind's codes) as
   its token decides (:meth:`~ditto_worker.runtime.cancel.CancelToken.outcome`, MEM-RUN-6:
   a deadline that passed before any explicit cancel is a timeout) — the handler is not
   called;
3. the handler runs: a returned :class:`~ditto_worker.contracts.NodeResult` is the answer
   as it stands (the MEMORY SDK and ``.define`` overrides own every NodeResult rule);
   a raw output is checked against ``NodeSpec.output`` (``INVALID_BACKEND_OUTPUT``) and
   wrapped once;
4. :class:`~ditto_worker.errors.NodeError` -> ``failed`` with its code and safe message
   (its code being the kind's cancelled / timeout code gives that status); any other
   exception -> ``failed`` with the kind's failure code and a generic message, logged
   with its type and stack but never its message or the call's input (memories and
   model text are personal data);
5. a raw-output handler that returns after its call was cancelled or its deadline passed
   answers ``cancelled`` / ``timeout`` whatever it returned (MEM-RUN-2: the work it did
   is not rolled back);
6. whatever said ``cancelled`` or ``timeout`` — a returned NodeResult, a NodeError with
   the kind's code — the token decides which (MEM-RUN-6): a handler's cancel path that
   saw its token cancelled by the deadline ticker answers ``timeout`` with the kind's
   timeout code, and a cancel requested before the deadline stays ``cancelled`` even when
   the handler noticed it late.

Never raises for a call failure.
"""

from __future__ import annotations

import difflib
import logging
import traceback
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import TypeAdapter, ValidationError

from ditto_worker.contracts import NodeResult, NodeStatus, any_result
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.runtime.cancel import CancelReason
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.node_spec import KindCodes, NodeSpec
from ditto_worker.scope import resolve_scope

if TYPE_CHECKING:
    from ditto_worker.scope import Scope

__all__ = ["Served", "run_node", "unknown_node"]

logger = logging.getLogger(__name__)


class Served(Protocol):
    """What :func:`run_node` reads of the worker definition serving a node (a
    :class:`~ditto_worker.runtime.definition.WorkerDefinition`)."""

    @property
    def kind_codes(self) -> KindCodes:
        """The kind's cancelled / timeout / failed codes."""

    @property
    def scope(self) -> Scope | None:
        """The tenant and user every call is bound to, or ``None``."""

    @property
    def require_scope(self) -> bool:
        """Refuse calls that arrive without a scope."""


@lru_cache(maxsize=256)
def _adapter(output: Any) -> TypeAdapter[Any]:
    return TypeAdapter(output)


_STOPPED_MESSAGES = {
    "timeout": "the call's deadline passed {when}",
    "cancelled": "the call was cancelled {when}",
}


def _stop(ctx: NodeContext, codes: KindCodes, reason: CancelReason, when: str) -> NodeResult[Any]:
    code = codes.timeout if reason == "timeout" else codes.cancelled
    message = _STOPPED_MESSAGES[reason].format(when=when)
    return NodeResult.failure(ctx.execution_id, ctx.node, code, message, reason)


def _stopped(ctx: NodeContext, codes: KindCodes, when: str) -> NodeResult[Any] | None:
    reason = ctx.cancel.outcome(ctx.deadline)
    return None if reason is None else _stop(ctx, codes, reason, when)


def _settled(result: NodeResult[Any], ctx: NodeContext, codes: KindCodes) -> NodeResult[Any]:
    """``result``, unless it says ``cancelled``/``timeout`` and the token says the other
    (MEM-RUN-6): then the token's status with the kind's code."""
    if result.status not in ("cancelled", "timeout"):
        return result
    reason = ctx.cancel.outcome(ctx.deadline)
    if reason is None or reason == result.status:
        return result
    return _stop(ctx, codes, reason, "while it ran")


def _from_error(exc: NodeError, ctx: NodeContext, codes: KindCodes) -> NodeResult[Any]:
    status: NodeStatus = (
        "cancelled"
        if exc.code == codes.cancelled
        else "timeout"
        if exc.code == codes.timeout
        else "failed"
    )
    result = NodeResult.failure(ctx.execution_id, ctx.node, exc.code, exc.safe_message, status)
    return _settled(result, ctx, codes)


def _wrap(raw: Any, spec: NodeSpec, ctx: NodeContext) -> NodeResult[Any]:
    output = raw
    if spec.output is not None:
        try:
            output = _adapter(spec.output).validate_python(raw)
        except ValidationError:
            return NodeResult.failure(
                ctx.execution_id, ctx.node, ErrorCode.INVALID_BACKEND_OUTPUT,
                f"{ctx.node} returned an output that breaks its contract",
            )  # fmt: skip
    return any_result()(execution_id=ctx.execution_id, node=ctx.node, status="success",
                           output=output)  # fmt: skip


def run_node(definition: Served, spec: NodeSpec, input: Any, ctx: NodeContext) -> NodeResult[Any]:
    """Run one call of ``spec`` (a node of ``definition``) with ``ctx``; see the module doc.

    Args:
        definition: the worker definition serving the node (its codes and scope binding).
        spec: the node.
        input: the node's JSON input (wire names).
        ctx: the call's context; ``ctx.node`` is set to ``spec.id`` when empty.

    Returns:
        The call's NodeResult (any status); never raises for a call failure.
    """
    if ctx.node != spec.id:
        ctx = replace(ctx, node=spec.id)
    codes = definition.kind_codes
    try:
        scope = resolve_scope(definition.scope, ctx.scope, definition.require_scope)
    except NodeError as exc:
        return _from_error(exc, ctx, codes)
    if scope != ctx.scope:
        ctx = replace(ctx, scope=scope)
    stopped = _stopped(ctx, codes, "before it started")
    if stopped is not None:
        return stopped
    try:
        raw = spec.handler(input, ctx)
    except NodeError as exc:
        return _from_error(exc, ctx, codes)
    except Exception as exc:
        logger.error(
            "%s %s: the handler raised %s\n%s", spec.id, ctx.execution_id, type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )  # fmt: skip
        return NodeResult.failure(
            ctx.execution_id, ctx.node, codes.failed,
            "the node handler failed; see the worker log for details",
        )  # fmt: skip
    if isinstance(raw, NodeResult):
        return _settled(raw, ctx, codes)
    return _stopped(ctx, codes, "while it ran") or _wrap(raw, spec, ctx)


def unknown_node(execution_id: str, node: object, known: Iterable[str]) -> NodeResult[Any]:
    """``failed``/``UNKNOWN_NODE`` for a node id no definition serves, naming the closest
    known ids (or all of them) — the same answer embedded and from a fleet client."""
    names = list(known)
    shown = str(node)[:80]
    close = difflib.get_close_matches(shown.upper(), names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names)}"
    return NodeResult.failure(
        execution_id, shown, ErrorCode.UNKNOWN_NODE, f"unknown node {shown!r}; {hint}"
    )
