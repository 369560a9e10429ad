"""The validating SDK: one method per MEMORY operation, the only caller of the ports.

``create_memory(store, search=None, defaults=None)`` returns a :class:`Memory` whose
``execute(node, input, defaults)`` and ``get``/``query``/``search``/``write``/``update``/
``delete`` always return a :class:`~ditto_worker.contracts.NodeResult`; a call failure
never raises. Knows nothing of Celery or any driver (STYLE.md "core").

One call, in order (SPEC.md MEM-ERR, MEM-PY-2):

1. unknown node -> ``failed``/``UNKNOWN_NODE``;
2. cancel token already set -> ``cancelled``/``MEMORY_CANCELLED``, deadline (absolute
   ``time.time()`` s) already passed -> ``timeout``/``MEMORY_TIMEOUT`` (plugin not
   called); the token decides which (MEM-RUN-6: a deadline that passed before any
   explicit cancel is a timeout, :meth:`~ditto_worker.runtime.cancel.CancelToken.outcome`);
3. SEARCH whose trusted scope is a task space (``task:<taskId>``) ->
   ``failed``/``INVALID_INPUT`` (MEM-SEARCH-7: checkpoints are never recalled; nothing
   of the store or provider is called); SEARCH without a provider ->
   ``failed``/``SEARCH_UNAVAILABLE`` (MEM-SEARCH-4);
4. input validation and pre-plugin rules -> ``failed``/``INVALID_INPUT`` (MEM-ERR-1;
   a SEARCH ``options`` key the provider does not declare included);
   empty batches are answered locally (MEM-GET-4, MEM-WRITE-1, MEM-UPDATE-4,
   MEM-DELETE-1);
5. a call with a trusted ``scope`` to a plugin that does not declare scope isolation ->
   ``failed``/``PERMISSION_DENIED`` (:mod:`ditto_worker.scope`); the plugin runs with
   ``MemoryCallOptions(cancel, deadline, execution_id, scope)``;
6. if the token was cancelled (or the deadline passed) while the plugin ran, the call is
   ``cancelled`` or ``timeout`` (as in 2) whatever the plugin did; a completed write is
   *not* rolled back (MEM-RUN-2, MEM-ERR-5);
7. ``MemoryError`` -> its code and safe message; any other exception ->
   ``MEMORY_BACKEND_ERROR`` with a generic message, the exception logged (MEM-ERR-4);
8. the output is checked (MEM-ERR-2) -> ``INVALID_BACKEND_OUTPUT`` on a violation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ditto_worker.contracts import (
    LONE_SURROGATE,
    MemoryDefaults,
    MemoryDeleteOutput,
    MemoryItem,
    MemoryQueryOutput,
    MemorySearchResult,
    NodeResult,
    check_text,
)
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.memory import checks
from ditto_worker.memory.call import (
    Prepared,
    error_result,
    run_call,
    stopped_result,
    success_result,
)
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.ports import (
    CancelToken,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)
from ditto_worker.memory.prepare import BUILTIN_QUERY_LIMIT, BUILTIN_SEARCH_LIMIT, NodePreparation
from ditto_worker.operation import check_operation_id
from ditto_worker.scope import Scope, parse_scope

__all__ = [
    "BUILTIN_QUERY_LIMIT", "BUILTIN_SEARCH_LIMIT", "Memory", "MemoryResources",
    "TASK_SPACE_SEARCH", "create_memory",
]  # fmt: skip

DefaultsArg = MemoryDefaults | Mapping[str, Any] | None
_MUTATIONS = frozenset({"MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"})
TASK_SPACE_SEARCH = (
    "Invalid input: scope.space: a task space (task:<taskId>) is never searched; read its "
    "checkpoints with MEMORY.GET or MEMORY.QUERY"
)
"""The message of a SEARCH in a task space (SPEC.md MEM-SEARCH-7)."""


@dataclass(frozen=True)
class MemoryResources:
    """The plugin objects of one memory definition (the seed's ``MemoryResources``).

    Attributes:
        store: the fact store; if it also has a ``search`` method, that is the native
            search used when ``search`` is ``None`` (MEM-SEARCH-5).
        search: an explicit search provider replacing the store's native search.
    """

    store: MemoryStore
    search: MemorySearchProvider | None = None


def parse_defaults(value: DefaultsArg, where: str) -> MemoryDefaults | None:
    """Parse a defaults layer (``{queryLimit?, searchLimit?}``, camelCase or snake_case).

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``<where>.<field>`` when a limit is not an
            integer 1-10000 or a key is unknown (MEM-ERR-1).
    """
    if value is None or isinstance(value, MemoryDefaults):
        return value
    return checks.parse_input(MemoryDefaults, value, prefix=where)


class Memory(NodePreparation):
    """The direct SDK over one store and an optional search provider (MEM-NODE-3).

    Built by :func:`create_memory`; the plugin objects are reused for every call and the
    defaults are a snapshot taken at creation (MEM-CONF-4).
    """

    def __init__(
        self,
        store: MemoryStore,
        search: MemorySearchProvider | None = None,
        defaults: DefaultsArg = None,
    ) -> None:
        self._store_scoped = _declares_scope(store)
        self._search_scoped = _declares_scope(store if search is None else search)
        try:
            parsed = parse_defaults(defaults, "defaults")
        except MemoryError as exc:
            raise ConfigError(exc.safe_message) from None
        self.store = store
        self.defaults: MemoryDefaults = parsed or MemoryDefaults()
        native = getattr(store, "search", None)
        self._search: Callable[..., object] | None = (
            search.search if search is not None else native if callable(native) else None
        )
        self._search_options = _declared_options(store if search is None else search)
        caps = getattr(store, "capabilities", None)
        self._operation_ids = bool(getattr(caps, "operation_ids", False))
        self._conditional = bool(getattr(caps, "conditional_update", False))
        self._prepare: dict[str, Callable[[Any, MemoryDefaults | None], Prepared]] = {
            "MEMORY.GET": self._prepare_get,
            "MEMORY.QUERY": self._prepare_query,
            "MEMORY.SEARCH": self._prepare_search,
            "MEMORY.WRITE": self._prepare_write,
            "MEMORY.UPDATE": self._prepare_update,
            "MEMORY.DELETE": self._prepare_delete,
        }

    @property
    def has_search(self) -> bool:
        """True when SEARCH has a provider (explicit or the store's native one)."""
        return self._search is not None

    # --- the executor -------------------------------------------------------------------

    def execute(
        self,
        node: str,
        input: Any,
        defaults: DefaultsArg = None,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
        runtime: Any = None,
        operation_id: str | None = None,
    ) -> NodeResult[Any]:
        """Run one MEMORY node and wrap its raw output once (MEM-NODE-1).

        Args:
            node: a node id, ``MEMORY.GET`` … ``MEMORY.DELETE``.
            input: the node's input as a dict (wire camelCase or snake_case names) or
                the contract model.
            defaults: the runtime-YAML layer (``workers.memory`` in ``ditto.yaml``),
                below the factory defaults (MEM-CONF-2; the seed's ``execute`` third
                argument).
            cancel: a cancel token passed on to the plugin (MEM-PY-2).
            execution_id: the call id; a new uuid4 string when ``None``.
            deadline: absolute ``time.time()`` seconds after which the caller gave up.
            scope: the trusted tenant scope (from the host, never the input); the store
                confines the call to it (:mod:`ditto_worker.scope`). ``None``: the
                unscoped namespace.
            runtime: what the plugin may use for sub-calls (``MemoryCallOptions.runtime``,
                the seed's ``runtime`` option): inside a worker, the call's
                ``NodeContext.invoke``, whose sub-calls inherit deadline, cancellation and
                scope.
            operation_id: the caller's operation id (MEM-RUN-7, :mod:`ditto_worker.operation`):
                a WRITE/UPDATE/DELETE with it is applied at most once per namespace and
                its records carry it; reads ignore it. A malformed one is
                ``INVALID_INPUT``; a store without ``capabilities.operation_ids``
                answers ``UNSUPPORTED`` (nothing applied).

        Returns:
            A NodeResult: ``success`` with the contract-model output, or ``failed`` /
            ``cancelled`` / ``timeout`` with an error code (see the module docstring).
        """
        eid = execution_id or str(uuid.uuid4())
        node = node if isinstance(node, str) else str(node)
        prepare = self._prepare.get(node)
        if prepare is None:
            return NodeResult.failure(eid, node, ErrorCode.UNKNOWN_NODE, "Unknown MEMORY node id.")
        try:  # stores keep the execution id (idempotency): it must be valid text
            if execution_id:  # one made here is
                check_text(eid)
        except ValueError:
            message = f"Invalid input: executionId {LONE_SURROGATE}"
            return NodeResult.failure(ascii(eid), node, ErrorCode.INVALID_INPUT, message)
        stopped = stopped_result(eid, node, cancel, deadline)
        if stopped is not None:
            return stopped
        try:  # scope: also a mapping {tenant, user, space?}, as Runtime.invoke takes it
            scope = parse_scope(scope)
            if node == "MEMORY.SEARCH" and scope is not None and scope.task_id is not None:
                return NodeResult.failure(eid, node, ErrorCode.INVALID_INPUT, TASK_SPACE_SEARCH)
            prepared = prepare(input, parse_defaults(defaults, "defaults"))
            check_operation_id(operation_id)
        except MemoryError as exc:
            return error_result(eid, node, exc)
        if isinstance(prepared, checks.Done):
            return success_result(eid, node, prepared.output)
        if scope is not None and not self._isolates_scope(node):
            return NodeResult.failure(eid, node, ErrorCode.PERMISSION_DENIED,
                                      "this memory store cannot isolate scopes")  # fmt: skip
        if operation_id is not None and node in _MUTATIONS and not self._operation_ids:
            return NodeResult.failure(eid, node, ErrorCode.UNSUPPORTED,
                                      "this memory store does not keep operation ids")  # fmt: skip
        options = MemoryCallOptions(
            cancel=cancel, deadline=deadline, execution_id=eid, scope=scope, runtime=runtime,
            operation_id=operation_id if node in _MUTATIONS else None,
        )  # fmt: skip
        return run_call(eid, node, prepared, options)

    def get(
        self,
        input: Any,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
    ) -> NodeResult[list[MemoryItem]]:
        """MEMORY.GET: exact reads by ids and/or keys (MEM-GET). Keywords as :meth:`execute`."""
        return self.execute(
            "MEMORY.GET",
            input,
            cancel=cancel,
            execution_id=execution_id,
            deadline=deadline,
            scope=scope,
        )

    def query(
        self,
        input: Any,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
    ) -> NodeResult[MemoryQueryOutput]:
        """MEMORY.QUERY: one page of a structured listing (MEM-QUERY)."""
        return self.execute(
            "MEMORY.QUERY",
            input,
            cancel=cancel,
            execution_id=execution_id,
            deadline=deadline,
            scope=scope,
        )

    def search(
        self,
        input: Any,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
    ) -> NodeResult[list[MemorySearchResult]]:
        """MEMORY.SEARCH: relevance search in the provider's order (MEM-SEARCH)."""
        return self.execute(
            "MEMORY.SEARCH",
            input,
            cancel=cancel,
            execution_id=execution_id,
            deadline=deadline,
            scope=scope,
        )

    def write(
        self,
        input: Any,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[list[MemoryItem]]:
        """MEMORY.WRITE: create records, one item per draft in order (MEM-WRITE)."""
        return self.execute(
            "MEMORY.WRITE",
            input,
            cancel=cancel,
            execution_id=execution_id,
            deadline=deadline,
            scope=scope,
            operation_id=operation_id,
        )

    def update(
        self,
        input: Any,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[list[MemoryItem]]:
        """MEMORY.UPDATE: partial updates by id, in request order (MEM-UPDATE)."""
        return self.execute(
            "MEMORY.UPDATE",
            input,
            cancel=cancel,
            execution_id=execution_id,
            deadline=deadline,
            scope=scope,
            operation_id=operation_id,
        )

    def delete(
        self,
        input: Any,
        *,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        deadline: float | None = None,
        scope: Scope | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[MemoryDeleteOutput]:
        """MEMORY.DELETE: returns the ids deleted by this call (MEM-DELETE)."""
        return self.execute(
            "MEMORY.DELETE",
            input,
            cancel=cancel,
            execution_id=execution_id,
            deadline=deadline,
            scope=scope,
            operation_id=operation_id,
        )

    def _isolates_scope(self, node: str) -> bool:
        """True when the plugin serving ``node`` declares scope isolation (see
        :func:`_declares_scope`); for SEARCH with an explicit provider, that provider. A
        scoped call to a plugin that does not declare it is refused (``PERMISSION_DENIED``)
        rather than run unconfined."""
        if node == "MEMORY.SEARCH":
            return self._search_scoped
        return self._store_scoped


def _declared_options(plugin: object) -> frozenset[str] | None:
    """The SEARCH ``options`` keys ``plugin`` declares it reads
    (``capabilities.search_options``), or ``None`` when it declares no
    :class:`StoreCapabilities` (its options are then not checked here)."""
    capabilities = getattr(plugin, "capabilities", None)
    if not isinstance(capabilities, StoreCapabilities):
        return None
    return capabilities.search_options


def _declares_scope(plugin: object) -> bool:
    """``plugin.capabilities.scope`` or ``plugin.supports_scope`` (read once per SDK)."""
    capabilities = getattr(plugin, "capabilities", None)
    return bool(getattr(plugin, "supports_scope", False) or getattr(capabilities, "scope", False))


def create_memory(
    store: MemoryStore,
    search: MemorySearchProvider | None = None,
    defaults: DefaultsArg = None,
) -> Memory:
    """Build the direct SDK (MEM-PY-1). Never reads ``ditto.yaml``.

    Args:
        store: the fact store plugin object (reused for every call, MEM-RUN-4).
        search: optional provider replacing ``store.search`` (MEM-SEARCH-5).
        defaults: ``{queryLimit?, searchLimit?}``, e.g. ``config.memory``; defaults, not
            caps (MEM-CONF-3).

    Raises:
        ConfigError: ``defaults`` is not a valid ``MemoryDefaults`` (limits 1-10000).
    """
    return Memory(store, search, defaults)
