"""The embedded runtime: worker definitions served in-process, without Celery (MEM-RT-2).

Used by :func:`~ditto_worker.runtime.runtime.create_ditto` when no broker is configured.
Each definition gets a thread pool of its ``concurrency`` (MEM-RUN-1: it limits concurrent
entry); every call is :func:`~ditto_worker.runtime.execute.run_node` in a pool thread with
the same :class:`~ditto_worker.runtime.context.NodeContext`, deadline, cancellation and
NodeResults as on the fleet:

* the input crosses as JSON (it is serialised and parsed, as it would be on a broker), so
  input that is not JSON data is ``INVALID_INPUT`` here too and a handler never shares the
  caller's objects;
* a call's token is cancelled when the caller cancels, and when its deadline passes (a
  ticker thread runs while calls are in flight; reason ``"timeout"``), so handlers that
  pass the token to their driver stop; the caller gets its NodeResult by the deadline
  (plus :data:`REPORT_SLACK_S`) even from a handler that ignores the token. Which of
  ``cancelled`` / ``timeout`` a stopped call ends with is the token's to say
  (:meth:`~ditto_worker.runtime.cancel.CancelToken.outcome`, MEM-RUN-6);
* ``ctx.invoke`` runs a sub-call through this runtime, inheriting the deadline, the
  cancellation and the scope (MEM-RT-3). A sub-call into a definition whose pool is full of
  callers waiting for it would wait until their deadline; give such definitions the
  concurrency they need;
* a definition's ``open`` hook (a model's start, a store from ``ditto.yaml``) runs once,
  before its first call's deadline starts (issue 25: a 5-8 s model start charged to a
  30 s call deadline), or at :meth:`EmbeddedRuntime.open` (``Runtime.open``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ditto_worker.contracts import NodeResult
from ditto_worker.runtime.calls import Call, CallPath, sub_invoker
from ditto_worker.runtime.cancel import CancelRegistry, CancelToken
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import KindCodes, NodeSpec, WorkerDefinition
from ditto_worker.runtime.execute import run_node
from ditto_worker.runtime.registry import node_table
from ditto_worker.scope import Scope

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig

__all__ = ["DEFAULT_CONCURRENCY", "REPORT_SLACK_S", "EmbeddedRuntime"]

DEFAULT_CONCURRENCY = 8
"""Pool size of a definition that declares no ``concurrency``."""
REPORT_SLACK_S = 0.25
"""How long past its deadline a call may take to report, seconds."""
_TICK_S = 0.01


class EmbeddedRuntime(CallPath):
    """Serves worker definitions in this process (see the module docstring); ``invoke`` /
    ``ainvoke`` as :class:`~ditto_worker.runtime.calls.Invoking` (``trace`` becomes the
    handler's ``ctx.headers``, ``operation_id`` its ``ctx.operation_id``). The first call
    of a definition runs its ``open`` hook first (in a worker thread for ``ainvoke``),
    before ``timeout`` starts counting (an absolute ``deadline`` is the caller's and keeps
    running).

    Args:
        definitions: the worker definitions to serve.
        config: the runtime config (``fleet.callTimeoutS``, the YAML defaults per kind).
        scope: the trusted scope of calls that name none.

    Raises:
        ConfigError: a node id served by two definitions.
    """

    closed_message = "the runtime is closed"

    def __init__(
        self,
        definitions: Sequence[WorkerDefinition],
        config: RuntimeConfig,
        scope: Scope | None = None,
    ) -> None:
        super().__init__(config.fleet.call_timeout_s, scope)
        self.definitions = list(definitions)
        self.table = node_table(self.definitions)
        self.config = config
        self._pools = {
            id(d): ThreadPoolExecutor(
                d.concurrency or DEFAULT_CONCURRENCY, thread_name_prefix=f"ditto-{d.kind.lower()}"
            )
            for d in self.definitions
        }
        self._registry = CancelRegistry()
        self._opened: set[int] = set()
        self._tried: set[int] = set()  # hooks already tried before a call
        self._open_locks = {id(d): threading.Lock() for d in self.definitions}
        self._ticker: threading.Thread | None = None

    # --- deadlines ------------------------------------------------------------------------

    def _tick(self) -> None:
        while True:
            with self._idle:
                if self._in_flight == 0:
                    self._ticker = None
                    return
            self._registry.expire_deadlines()
            time.sleep(_TICK_S)

    def _accepted(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="ditto-deadlines",
                                            daemon=True)  # fmt: skip
            self._ticker.start()

    # --- open hooks -----------------------------------------------------------------------

    def open(self, nodes: Sequence[str] | None = None) -> None:
        """Run the ``open`` hook of each definition serving ``nodes`` (default: all) that
        has not opened yet: load models and build stores now, e.g. at application start.

        Raises:
            Exception: whatever a hook raised (it runs again on the next call or ``open``).
        """
        wanted = self.table if nodes is None else {n: self.table[n] for n in nodes}
        for definition in {id(d): d for d, _ in wanted.values()}.values():
            self._open(definition)

    def _open(self, definition: WorkerDefinition, before_call: bool = False) -> None:
        key = id(definition)
        if definition.open is None or key in self._opened:
            return
        with self._open_locks[key]:  # concurrent first calls wait for one hook run
            if key in self._opened or (before_call and key in self._tried):
                return
            self._tried.add(key)
            definition.open()
            self._opened.add(key)

    def _ready(self, node: str) -> None:
        """Open the definition serving ``node`` before the call's deadline starts, so a
        model's start is never charged to a call (issue 25). A hook that fails is logged
        (its type) and the call goes on: its handler builds what it needs on first use,
        within its deadline, and answers with its own error, as before. Tried once per
        definition before calls (a down server's connect timeout is not added to every
        call); :meth:`open` tries again."""
        entry = self.table.get(node)
        if entry is None:
            return
        try:
            self._open(entry[0], before_call=True)
        except Exception as exc:
            log.warning("the open hook of %s failed (%s); its handler builds on first use",
                        entry[0].kind, type(exc).__name__)  # fmt: skip

    async def _aready(self, node: str) -> None:
        await asyncio.to_thread(self._ready, node)

    # --- one call -------------------------------------------------------------------------

    def _codes_of(self, node: str) -> KindCodes | None:
        entry = self.table.get(node)
        return None if entry is None else entry[0].kind_codes

    def _node_ids(self) -> Iterable[str]:
        return self.table

    def _payload(self, input: Any) -> Any:
        """``input`` as it would arrive from a broker (JSON out and back)."""
        if isinstance(input, BaseModel):
            return super()._payload(input)
        return json.loads(json.dumps(input, allow_nan=False))

    def _submit(self, call: Call) -> tuple[Future[NodeResult[Any]], NodeContext]:
        """Start ``call`` in its definition's pool: its future and its context."""
        definition, spec = self.table[call.node]
        ctx = NodeContext(call.execution_id, call.node, call.cancel or CancelToken(),
                          call.deadline, call.scope, headers=call.trace,
                          operation_id=call.operation_id,
                          defaults=self.config.defaults_for(definition.kind))  # fmt: skip
        future = self._pools[id(definition)].submit(self._run, definition, spec, call.payload, ctx)
        return future, ctx

    def _run(
        self, definition: WorkerDefinition, spec: NodeSpec, payload: Any, caller: NodeContext
    ) -> NodeResult[Any]:
        with self._registry.running(caller.execution_id, caller.deadline) as token:
            unlink = caller.cancel.link(token)
            try:
                ctx = replace(caller, cancel=token)
                ctx = replace(ctx, invoke=sub_invoker(lambda: self, ctx.deadline, token,
                                                      ctx.scope, ctx.headers))  # fmt: skip
                return run_node(definition, spec, payload, ctx)
            finally:
                unlink()

    def _gave_up(self, call: Call, ctx: NodeContext) -> NodeResult[Any]:
        """The call did not report by its deadline (plus slack): stop it, and answer what
        its caller's token says (MEM-RUN-6; ``timeout`` unless a cancel came first)."""
        self._registry.cancel(call.execution_id, reason="timeout")
        return call.stopped(ctx.cancel.outcome(call.deadline) or "timeout", "before it reported")

    def _run_call(self, call: Call) -> NodeResult[Any]:
        future, ctx = self._submit(call)
        try:
            return future.result(timeout=max(0.0, call.deadline - time.time()) + REPORT_SLACK_S)
        except FutureTimeout:
            return self._gave_up(call, ctx)

    async def _arun_call(self, call: Call) -> NodeResult[Any]:
        future, ctx = self._submit(call)
        wait_s = max(0.0, call.deadline - time.time()) + REPORT_SLACK_S
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), wait_s)
        except TimeoutError:
            return self._gave_up(call, ctx)
        except asyncio.CancelledError:  # an explicit cancel of the awaiting task
            ctx.cancel.cancel()
            self._registry.cancel(call.execution_id)
            raise

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain accepted calls (up to ``timeout_s``), stop the pools and run each
        definition's ``close`` hook; application-owned plugin objects are not closed
        (MEM-RUN-3). New calls fail with ``MEMORY_BACKEND_ERROR``."""
        self._drain(timeout_s)
        for pool in self._pools.values():
            pool.shutdown(wait=True)
        for definition in self.definitions:
            if definition.close is not None:
                definition.close()
