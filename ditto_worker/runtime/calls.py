"""One invoke path for every way of running a node call (MEM-RT-2, MEM-PY-2/3, MEM-RUN-6/7).

:class:`Invoking` is ``invoke`` / ``ainvoke`` written once: the fleet client
(:class:`~ditto_worker.fleet.client.DittoClient`), the embedded runtime
(:class:`~ditto_worker.runtime.embedded.EmbeddedRuntime`) and the runtime in front of
either (:class:`~ditto_worker.runtime.runtime.Runtime`) all are one, so a call takes the
same arguments and ends the same way wherever it runs. The first two are a
:class:`CallPath`, which runs a call in four steps, each in one place:

1. :meth:`CallPath.call_of` turns the arguments into a :class:`Call` — its execution id,
   its absolute deadline (:func:`~ditto_worker.runtime.context.call_deadline`), the
   trusted scope, the checked operation id, the JSON input, its trace — or into the
   NodeResult that refuses it before anything runs: ``UNKNOWN_NODE`` (naming the closest
   known ids); ``cancelled`` / ``timeout`` for a token cancelled before the call was sent
   (the token decides which, MEM-RUN-6); ``PERMISSION_DENIED`` / ``INVALID_INPUT`` for a
   malformed scope or operation id; ``INVALID_INPUT`` for input that is not JSON data;
2. the call is counted in flight (``close`` drains them), or refused once the caller is
   closed (``MEMORY_BACKEND_ERROR``);
3. the transport runs it (``_run_call``; ``_arun_call`` for asyncio, which cancels the
   call when the awaiting task is cancelled and re-raises ``asyncio.CancelledError``);
4. :meth:`CallPath.settle` maps the answer back: a call that ended ``cancelled`` or
   ``timeout`` ends as the caller's token says (MEM-RUN-6).

A layer that sends several calls together slots in between 1 and 4: it takes Calls and
hands back one NodeResult per Call.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from pydantic import BaseModel

from ditto_worker.contracts import NodeResult, NodeStatus, to_wire
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.operation import check_operation_id
from ditto_worker.runtime.cancel import CancelReason, CancelToken, stop_outcome
from ditto_worker.runtime.context import SubInvoke, call_deadline
from ditto_worker.runtime.execute import unknown_node
from ditto_worker.runtime.node_spec import KindCodes
from ditto_worker.runtime.trace import clean_trace
from ditto_worker.scope import Scope, parse_scope

__all__ = ["Call", "CallOptions", "CallPath", "Invoking", "sub_invoker"]

STOPPED: dict[CancelReason, str] = {
    "cancelled": "the call was cancelled",
    "timeout": "the call timed out",
}
"""The message of a call the runtime stopped, by status (a detail may follow)."""


@dataclass(frozen=True, slots=True)
class CallOptions:
    """The keyword arguments of one ``invoke`` / ``ainvoke`` (:meth:`Invoking.invoke`)."""

    timeout: float | None = None
    cancel: CancelToken | None = None
    execution_id: str | None = None
    scope: Scope | Mapping[str, str] | None = None
    deadline: float | None = None
    trace: Mapping[str, str] | None = None
    operation_id: str | None = None

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of ``invoke`` / ``ainvoke``."""
        return {name: getattr(self, name) for name in _OPTION_NAMES}


_OPTION_NAMES = tuple(f.name for f in fields(CallOptions))


@dataclass(frozen=True, slots=True)
class Call:
    """One accepted node call, ready to run or to send (step 1 of the module docstring).

    Attributes:
        node: the node id.
        payload: the node input as JSON data (wire names).
        execution_id: the call's id (the Celery task id on the fleet).
        deadline: absolute ``time.time()`` seconds after which the caller gives up.
        codes: the node kind's cancelled / timeout / failed codes.
        cancel: the caller's token, or ``None`` (the call cannot be cancelled).
        scope: the trusted tenant scope, or ``None`` (unscoped).
        operation_id: the checked operation id (MEM-RUN-7), or ``None``.
        trace: the clean trace ids (:func:`~ditto_worker.runtime.trace.clean_trace`).
    """

    node: str
    payload: Any
    execution_id: str
    deadline: float
    codes: KindCodes
    cancel: CancelToken | None = None
    scope: Scope | None = None
    operation_id: str | None = None
    trace: Mapping[str, str] = field(default_factory=dict)

    def failed(self, code: str, message: str) -> NodeResult[Any]:
        """``failed`` with ``code``."""
        return NodeResult.failure(self.execution_id, self.node, code, message)

    def stopped(self, status: CancelReason, detail: str | None = None) -> NodeResult[Any]:
        """``cancelled`` / ``timeout`` with the kind's code; the message is
        :data:`STOPPED`'s, then ``detail`` when given."""
        code = self.codes.cancelled if status == "cancelled" else self.codes.timeout
        message = STOPPED[status] if detail is None else f"{STOPPED[status]} {detail}"
        return NodeResult.failure(self.execution_id, self.node, code, message, status)

    def timed_out(self, message: str = STOPPED["timeout"]) -> NodeResult[Any]:
        """``timeout`` with the kind's timeout code and ``message``."""
        return self._ended("timeout", self.codes.timeout, message)

    def cancelled(self, message: str = STOPPED["cancelled"]) -> NodeResult[Any]:
        """``cancelled`` with the kind's cancelled code and ``message``."""
        return self._ended("cancelled", self.codes.cancelled, message)

    def _ended(self, status: NodeStatus, code: str, message: str) -> NodeResult[Any]:
        return NodeResult.failure(self.execution_id, self.node, code, message, status)


class Invoking(ABC):
    """``invoke`` / ``ainvoke``, written once for every caller of node calls."""

    def invoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        deadline: float | None = None,
        trace: Mapping[str, str] | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[Any]:
        """Run one node call and wait for its NodeResult (MEM-NODE-3, MEM-RT-2).

        Args:
            node: a node id (``MEMORY.GET``, ``CONTEXT.UPDATE`` …).
            input: the node input: JSON data (wire names) or a contract model.
            timeout: seconds to wait; default the caller's call timeout
                (``fleet.callTimeoutS``).
            cancel: a token; cancelling it cancels the call (``cancelled``, the kind's
                code; on the fleet: revoke + the call's cancel flag, which interrupts a
                running call in the plugin's driver).
            execution_id: the call's id (the Celery task id on the fleet); a new uuid4
                when omitted.
            scope: the trusted tenant scope the call acts for (a
                :class:`~ditto_worker.scope.Scope` or ``{"tenant", "user", "space"?}``),
                sent in the ``ditto_scope`` header; default: the caller's ``scope``. The
                service sets it from its authenticated identity, never from model output.
            deadline: an absolute deadline (``time.time()`` seconds), e.g. a parent call's
                for a sub-call; the earlier of it and ``timeout`` holds (MEM-PY-3).
            trace: tracing ids ``{run_id, graph, graph_node}`` (a Graph run sets them): the
                handler's ``ctx.headers``, message headers and the task's ``argsrepr``,
                which Flower and the worker log show; ids only, never content
                (:mod:`ditto_worker.runtime.trace`).
            operation_id: the caller's operation id (MEM-RUN-7,
                :mod:`ditto_worker.operation`): one id per intended effect across attempts
                (a replay gets a new execution id, the same operation id); MEMORY
                WRITE/UPDATE/DELETE apply it at most once and keep it with their records;
                the handler sees it as ``ctx.operation_id``.

        Returns:
            The call's NodeResult: ``success``, or ``failed`` (``UNKNOWN_NODE`` for an id
            no definition has, before anything runs; ``INVALID_INPUT`` for input that is
            not JSON data or a malformed operation id; ``PERMISSION_DENIED`` for a
            malformed scope or one the worker does not serve; ``FLEET_UNAVAILABLE`` when
            the broker or result backend is unreachable, naming its ``host:port``;
            ``MEMORY_BACKEND_ERROR`` once closed; ``INVALID_BACKEND_OUTPUT`` for a
            malformed reply), ``timeout`` (the kind's timeout code; on a Redis fleet the
            message says when a worker for the node's queue was last seen) or
            ``cancelled`` (the kind's cancelled code). Never raises for a call failure.
        """
        options = CallOptions(timeout, cancel, execution_id, scope, deadline, trace,
                              operation_id)  # fmt: skip
        return self._invoke(node, input, options)

    async def ainvoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        deadline: float | None = None,
        trace: Mapping[str, str] | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[Any]:
        """:meth:`invoke` for asyncio: same arguments, same NodeResult.

        Raises:
            asyncio.CancelledError: the awaiting task was cancelled; the call is cancelled
                first (on the fleet: revoke + cancel flag), MEM-PY-2.
        """
        options = CallOptions(timeout, cancel, execution_id, scope, deadline, trace,
                              operation_id)  # fmt: skip
        return await self._ainvoke(node, input, options)

    @abstractmethod
    def _invoke(self, node: str, input: Any, options: CallOptions) -> NodeResult[Any]:
        """Run the call :meth:`invoke` describes."""

    @abstractmethod
    async def _ainvoke(self, node: str, input: Any, options: CallOptions) -> NodeResult[Any]:
        """Run the call :meth:`ainvoke` describes."""

    @abstractmethod
    def close(self, timeout_s: float = 30.0) -> None:
        """Drain the calls accepted (up to ``timeout_s``), then release what is owned."""


class CallPath(Invoking):
    """The shared steps of a call (module docstring); a transport adds step 3.

    Args:
        default_timeout_s: a call's timeout when it names none, seconds
            (``fleet.callTimeoutS``).
        scope: the trusted scope of calls that name none.
    """

    closed_message: ClassVar[str] = "the client is closed"
    """The message of a call made after ``close`` (``MEMORY_BACKEND_ERROR``)."""

    def __init__(self, default_timeout_s: float, scope: Scope | None) -> None:
        self.default_timeout_s = default_timeout_s
        self._scope = scope
        self._idle = threading.Condition()
        self._in_flight = 0
        self._closed = False

    # --- what a transport says --------------------------------------------------------------

    @abstractmethod
    def _codes_of(self, node: str) -> KindCodes | None:
        """The codes of ``node``'s kind; ``None`` for a node this caller does not know."""

    @abstractmethod
    def _node_ids(self) -> Iterable[str]:
        """Every node id this caller knows (named when a call names another)."""

    @abstractmethod
    def _run_call(self, call: Call) -> NodeResult[Any]:
        """Step 3: run ``call`` and wait for its NodeResult (by its deadline)."""

    @abstractmethod
    async def _arun_call(self, call: Call) -> NodeResult[Any]:
        """Step 3 for asyncio; cancels the call when the awaiting task is cancelled."""

    def _new_id(self) -> str:
        """A new execution id (uuid4)."""
        return str(uuid.uuid4())

    def _payload(self, input: Any) -> Any:
        """The input as JSON data: a contract model as its wire JSON, anything else as
        given. Raises ``TypeError`` / ``ValueError`` for input that is not JSON data."""
        return to_wire(input) if isinstance(input, BaseModel) else input

    def _ready(self, node: str) -> None:
        """Before a call of ``node`` (and before its deadline starts)."""

    async def _aready(self, node: str) -> None:
        """:meth:`_ready` for asyncio."""

    def _accepted(self) -> None:
        """A call was counted in flight (called holding the lock)."""

    # --- the steps ------------------------------------------------------------------------

    def call_of(self, node: str, input: Any, options: CallOptions) -> Call | NodeResult[Any]:
        """Step 1: the :class:`Call`, or the NodeResult refusing it before it runs."""
        eid = options.execution_id or self._new_id()
        codes = self._codes_of(node)
        if codes is None:
            return unknown_node(eid, node, self._node_ids())
        until = call_deadline(self.default_timeout_s, options.timeout, options.deadline)
        call = Call(node, None, eid, until, codes, options.cancel)
        if options.cancel is not None and options.cancel.cancelled:
            return call.stopped(options.cancel.outcome(until) or "cancelled", "before it was sent")
        try:
            bound = self._scope if options.scope is None else parse_scope(options.scope)
            operation_id = check_operation_id(options.operation_id)
            payload = self._payload(input)
        except NodeError as exc:
            return call.failed(exc.code, exc.safe_message)
        except (TypeError, ValueError):
            return call.failed(ErrorCode.INVALID_INPUT, "input is not JSON data")
        trace = clean_trace(options.trace)
        return Call(node, payload, eid, until, codes, options.cancel, bound, operation_id, trace)

    def settle(self, result: NodeResult[Any], call: Call) -> NodeResult[Any]:
        """Step 4, MEM-RUN-6 on the caller's side: a call that ended ``cancelled`` or
        ``timeout`` (the worker's answer, or the caller's own at the deadline) ends as the
        caller's token says (:meth:`~ditto_worker.runtime.cancel.CancelToken.outcome`) — a
        cancel requested before the deadline is ``cancelled`` even when it reached the
        worker after it, and a deadline that passed before any cancel is ``timeout``."""
        if result.status not in ("cancelled", "timeout"):
            return result
        reason = stop_outcome(call.cancel, call.deadline)
        if reason is None or reason == result.status:
            return result
        return NodeResult.failure(result.execution_id, result.node,
                                  call.codes.cancelled if reason == "cancelled" else
                                  call.codes.timeout, STOPPED[reason], reason)  # fmt: skip

    @contextmanager
    def _tracked(self) -> Iterator[bool]:
        """Step 2: count the call in flight; yields False (and counts nothing) once
        closed."""
        with self._idle:
            if self._closed:
                yield False
                return
            self._in_flight += 1
            self._accepted()
        try:
            yield True
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _invoke(self, node: str, input: Any, options: CallOptions) -> NodeResult[Any]:
        self._ready(node)
        call = self.call_of(node, input, options)
        if isinstance(call, NodeResult):
            return call
        with self._tracked() as accepted:
            if not accepted:
                return call.failed(ErrorCode.MEMORY_BACKEND_ERROR, self.closed_message)
            return self.settle(self._run_call(call), call)

    async def _ainvoke(self, node: str, input: Any, options: CallOptions) -> NodeResult[Any]:
        await self._aready(node)
        call = self.call_of(node, input, options)
        if isinstance(call, NodeResult):
            return call
        with self._tracked() as accepted:
            if not accepted:
                return call.failed(ErrorCode.MEMORY_BACKEND_ERROR, self.closed_message)
            return self.settle(await self._arun_call(call), call)

    def _drain(self, timeout_s: float) -> None:
        """Refuse new calls and wait (up to ``timeout_s``) for those in flight."""
        with self._idle:
            self._closed = True
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    @property
    def in_flight(self) -> int:
        """Calls accepted and not yet answered."""
        return self._in_flight


def sub_invoker(
    target: Callable[[], Invoking], deadline: float | None, cancel: CancelToken,
    scope: Scope | None, trace: Mapping[str, str],
) -> SubInvoke:  # fmt: skip
    """``ctx.invoke`` of one call: a sub-call through ``target()`` that inherits the
    call's deadline, cancellation, scope and trace (MEM-RT-3), never its operation id."""

    def invoke(node: str, input: Any, *, timeout: float | None = None,
               execution_id: str | None = None,
               operation_id: str | None = None) -> NodeResult[Any]:  # fmt: skip
        return target().invoke(node, input, timeout=timeout, deadline=deadline, cancel=cancel,
                               scope=scope, execution_id=execution_id, trace=trace,
                               operation_id=operation_id)  # fmt: skip

    return invoke
