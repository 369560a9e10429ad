"""Graphs of node calls and their results (SPEC.md MEM-GRAPH; the seed's ``graph()``).

A :class:`Graph` names node calls and their dependencies; the runtime runs it
(``Runtime.run`` / ``arun``, :mod:`ditto_worker.runtime.graph_runner`)::

    plan = (
        graph("memory-context")
        .node("search", "MEMORY.SEARCH", [], lambda query: {"query": query, "limit": 5})
        .node("context", "CONTEXT.UPDATE", ["search"], to_context)
    )
    result = runtime.run(plan, "language preference")

* ``node(id, node_type, deps, bind)`` returns a new Graph (a Graph never changes). ``bind``
  maps the run input and the NodeResults of ``deps`` (a read-only mapping dep id ->
  NodeResult) to the node's input: ``bind(input, results)``; a one-parameter ``bind``
  gets the input only; ``None`` passes the run input as is. ``bind`` checks a dep's
  ``status`` before it uses its ``output`` (the seed); raising fails the node with
  ``GRAPH_BIND_FAILED``.
* A node may carry its own call ``timeout`` (seconds; default ``fleet.callTimeoutS``, still
  cut to the run's deadline) and an ``operation_id`` (MEM-RUN-7): a string, or
  ``operation_id(input, results)`` like ``bind`` (a one-parameter one gets the input
  only) returning one or ``None`` — e.g. ``lambda task: f"{task['id']}:save"``, so a
  resumed task replays the same effect under the same id (raising fails the node with
  ``GRAPH_BIND_FAILED``).
* A node may name the **space** its call runs in (``space="task:<taskId>"`` or
  ``"memory"``): the run's trusted tenant and user in that space
  (:meth:`~ditto_worker.scope.Scope.in_space`; SPEC.md MEM-TASK-2). The host's plan
  chooses it, never a node input; a run without a scope fails such a node with
  ``PERMISSION_DENIED``. Default: the run's scope as it is.
* It is validated as it is built: a duplicate id, a dep that is not (yet) in the Graph, a
  node depending on itself, a malformed node type or deps given as one string raise
  :class:`GraphError`. :meth:`Graph.of` builds one from nodes in any order and also finds
  cycles. Node types are checked against a runtime's nodes before anything runs
  (:meth:`Graph.check`, called by ``run``).

:class:`GraphResult` and :class:`LoopResult` are what ``run`` and ``loop`` return
(:mod:`ditto_worker.runtime.graph_results`, re-exported here). Nothing here runs anything
or imports Celery.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import DittoError, ErrorCode, NodeError
from ditto_worker.operation import check_operation_id
from ditto_worker.runtime.graph_results import GraphResult, GraphStatus, LoopResult, _AnyResult
from ditto_worker.scope import Scope

__all__ = [
    "DEFAULT_LOOP_BUDGET",
    "Bind",
    "Graph",
    "GraphBudgetExhausted",
    "GraphError",
    "GraphNode",
    "GraphResult",
    "GraphStatus",
    "LoopResult",
    "graph",
]

DEFAULT_LOOP_BUDGET = 1024
"""Graphs one ``loop`` may run, sub-plans, recovery and repetitions included (the seed's
1024-Graph budget; ``ditto.yaml`` ``graph.loopBudget``)."""

MAX_ID_CHARS = 128
"""Longest Graph name or Graph node id, characters."""

Bind = Callable[[Any, Mapping[str, _AnyResult]], Any]
"""``bind(input, results) -> node input``; ``results`` maps each dep id to its NodeResult."""

_NODE_TYPE = re.compile(r"[A-Z][A-Z0-9_]*\.[A-Z0-9_.]+")


class GraphError(DittoError):
    """A Graph that cannot run: duplicate id, unknown dep, cycle, malformed or unknown node
    type, or a plan that yields something other than ``(graph, input)``. Raised before any
    node of the Graph runs; a programming error, not a node failure."""


class GraphBudgetExhausted(NodeError):
    """Raised into a loop's plan at the ``yield`` past its budget (code
    ``GRAPH_BUDGET_EXHAUSTED``, MEM-GRAPH-4). Uncaught, the loop ends ``failed`` with it."""

    def __init__(self, budget: int) -> None:
        super().__init__(
            ErrorCode.GRAPH_BUDGET_EXHAUSTED,
            f"the loop has run its budget of {budget} Graphs (graph.loopBudget)",
        )
        self.budget = budget


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise GraphError(f"{what} must be a non-empty string")
    if len(value) > MAX_ID_CHARS or any(not c.isprintable() or c.isspace() for c in value):
        raise GraphError(
            f"{what} {value[:40]!r} must be at most {MAX_ID_CHARS} printable characters "
            "without spaces"
        )
    return value


def _check_space(node_id: str, space: Any) -> None:
    try:
        Scope("t", "u", space)
    except NodeError as exc:
        raise GraphError(f"node {node_id!r}: {exc.safe_message}") from None


def _two_args(bind: Callable[..., Any]) -> Bind:
    """``bind`` as ``bind(input, results)``: a one-parameter callable gets the input only."""
    try:
        params = list(inspect.signature(bind).parameters.values())
    except (TypeError, ValueError):  # no signature (some builtins): called with both
        return bind
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(positional) == 1 and not varargs:
        return lambda input, _results: bind(input)
    return bind


@dataclass(frozen=True)
class GraphNode:
    """One node of a Graph.

    Attributes:
        id: the node's id within its Graph (the seed's ``"search"``), at most 128 printable
            characters without spaces.
        node_type: the node id it calls (``MEMORY.SEARCH``).
        deps: ids of the nodes that must end before it starts, each once (kept as a tuple).
        bind: ``bind(input, results)`` as given (a one-parameter callable is called with
            the input only), or ``None``: the run input is the node's input.
        timeout: the call's timeout, seconds > 0 (cut to the run's deadline), or ``None``:
            the runtime's call timeout (``fleet.callTimeoutS``).
        operation_id: the call's operation id (MEM-RUN-7, :mod:`ditto_worker.operation`): a
            string, a callable ``(input, results) -> str | None`` (a one-parameter one
            gets the input only), or ``None``.
        space: the space of the node's call (``memory`` or ``task:<taskId>``, checked as
            :attr:`ditto_worker.scope.Scope.space`), or ``None``: the run's scope as is.
    """

    id: str
    node_type: str
    deps: Sequence[str] = ()
    bind: Callable[..., Any] | None = None
    timeout: float | None = None
    operation_id: str | Callable[..., str | None] | None = None
    space: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.id, "a Graph node id")
        if not isinstance(self.node_type, str) or not _NODE_TYPE.fullmatch(self.node_type):
            shown = self.node_type[:80] if isinstance(self.node_type, str) else self.node_type
            raise GraphError(
                f"node {self.id!r}: node type {shown!r} is not a node id such as MEMORY.GET"
            )
        deps = self.deps
        if isinstance(deps, str) or not isinstance(deps, Iterable):
            raise GraphError(f"node {self.id!r}: deps must be a list of node ids, not {deps!r}")
        deps = tuple(deps)
        for dep in deps:
            _check_name(dep, f"a dep of node {self.id!r}")
        if len(set(deps)) != len(deps):
            raise GraphError(f"node {self.id!r} names a dep twice")
        object.__setattr__(self, "deps", deps)
        if self.bind is not None and not callable(self.bind):
            raise GraphError(f"node {self.id!r}: bind must be callable or None")
        object.__setattr__(self, "_bound", None if self.bind is None else _two_args(self.bind))
        self._check_call_options()

    def _check_call_options(self) -> None:
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise GraphError(f"node {self.id!r}: timeout must be a number of seconds > 0")
        op = self.operation_id
        if op is not None and not callable(op):
            try:
                check_operation_id(op)
            except NodeError as exc:
                raise GraphError(f"node {self.id!r}: {exc.safe_message}") from None
        object.__setattr__(self, "_operation", _two_args(op) if callable(op) else None)
        if self.space is not None:
            _check_space(self.id, self.space)

    def bound(self) -> Bind | None:
        """:attr:`bind` as a two-argument callable (``None`` when there is none)."""
        bound: Bind | None = self.__dict__["_bound"]
        return bound

    def operation(self, input: Any, results: Mapping[str, NodeResult[Any]]) -> str | None:
        """The call's operation id for this run (a callable ``operation_id`` is called)."""
        made = self.__dict__["_operation"]
        if made is None:
            return self.operation_id if isinstance(self.operation_id, str) else None
        value: str | None = made(input, results)
        return value


def _topological(name: str, nodes: Sequence[GraphNode]) -> tuple[GraphNode, ...]:
    """``nodes`` ordered so each comes after its deps (declaration order kept where it
    allows); raises :class:`GraphError` for a duplicate id, an unknown dep or a cycle."""
    by_id: dict[str, GraphNode] = {}
    for node in nodes:
        if node.id in by_id:
            raise GraphError(f"graph {name!r}: node id {node.id!r} given twice")
        by_id[node.id] = node
    for node in nodes:
        for dep in node.deps:
            if dep not in by_id:
                raise GraphError(f"graph {name!r}: node {node.id!r} depends on {dep!r}, "
                                 "which is not in the graph")  # fmt: skip
    ordered: list[GraphNode] = []
    placed: set[str] = set()
    remaining = list(nodes)
    while remaining:
        ready = [n for n in remaining if all(d in placed for d in n.deps)]
        if not ready:
            cycle = ", ".join(repr(n.id) for n in remaining)
            raise GraphError(f"graph {name!r} has a cycle among nodes {cycle}")
        ordered.extend(ready)
        placed.update(n.id for n in ready)
        remaining = [n for n in remaining if n.id not in placed]
    return tuple(ordered)


class Graph:
    """An immutable Graph of node calls (build with :func:`graph`; see the module doc).

    Attributes:
        name: the Graph's name (shown in traces: the ``ditto_graph`` header).
        nodes: its nodes, each after its deps.
    """

    __slots__ = ("_by_id", "name", "nodes")

    name: str
    nodes: tuple[GraphNode, ...]
    _by_id: dict[str, GraphNode]

    def __init__(self, name: str, nodes: Sequence[GraphNode] = ()) -> None:
        object.__setattr__(self, "name", _check_name(name, "a Graph name"))
        ordered = _topological(name, list(nodes))
        object.__setattr__(self, "nodes", ordered)
        object.__setattr__(self, "_by_id", {n.id: n for n in ordered})

    @classmethod
    def of(cls, name: str, nodes: Iterable[GraphNode]) -> Graph:
        """A Graph from nodes in any order (deps may come later in the list).

        Raises:
            GraphError: a duplicate id, an unknown dep or a cycle (naming the nodes on it).
        """
        return cls(name, list(nodes))

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("a Graph never changes; node() returns a new one")

    def node(
        self,
        id: str,
        node_type: str,
        deps: Sequence[str] = (),
        bind: Callable[..., Any] | None = None,
        *,
        timeout: float | None = None,
        operation_id: str | Callable[..., str | None] | None = None,
        space: str | None = None,
    ) -> Graph:
        """A new Graph with one more node (the seed's ``.node(id, type, deps, bind)``).

        Args:
            id: the node's id in this Graph.
            node_type: the node id to call (``MEMORY.GET`` …).
            deps: ids of nodes already in this Graph that must end before it starts.
            bind: ``bind(input, results)`` -> the node's input (see the module doc).
            timeout: this node's call timeout, seconds (default ``fleet.callTimeoutS``).
            operation_id: this node's operation id, a string or ``(input, results) ->
                str | None`` (:class:`GraphNode`).
            space: the space this node's call runs in (``memory`` / ``task:<taskId>``);
                default the run's scope as is (see the module doc).

        Raises:
            GraphError: a duplicate id, a dep not in the Graph (or the node itself), a
                malformed node type, deps given as a string, a bind that is not callable,
                a timeout that is not > 0, a malformed operation id.
        """
        new = GraphNode(id, node_type, deps, bind, timeout, operation_id, space)
        if new.id in self._by_id:
            raise GraphError(f"graph {self.name!r}: node id {new.id!r} given twice")
        for dep in new.deps:
            if dep == new.id:
                raise GraphError(f"graph {self.name!r}: node {new.id!r} depends on itself "
                                 "(a cycle)")  # fmt: skip
            if dep not in self._by_id:
                raise GraphError(
                    f"graph {self.name!r}: node {new.id!r} depends on {dep!r}, which is not "
                    "in the graph (declare a node before the nodes that depend on it)"
                )
        clone = object.__new__(Graph)
        object.__setattr__(clone, "name", self.name)
        object.__setattr__(clone, "nodes", (*self.nodes, new))
        object.__setattr__(clone, "_by_id", {**self._by_id, new.id: new})
        return clone

    def __getitem__(self, node_id: str) -> GraphNode:
        return self._by_id[node_id]

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {[n.id for n in self.nodes]!r})"

    @property
    def deps(self) -> dict[str, list[str]]:
        """Node id -> the ids it depends on (the dependency edges), in node order."""
        return {n.id: list(n.deps) for n in self.nodes}

    def check(self, node_types: Collection[str]) -> None:
        """Check every node type against the node ids a runtime serves.

        Args:
            node_types: the known node ids (``Runtime.nodes``).

        Raises:
            GraphError: a node whose type is not among ``node_types`` (naming both).
        """
        for node in self.nodes:
            if node.node_type not in node_types:
                raise GraphError(
                    f"graph {self.name!r}: node {node.id!r} calls {node.node_type!r}, which "
                    f"this runtime does not serve (known: {', '.join(sorted(node_types))})"
                )


def graph(name: str) -> Graph:
    """An empty Graph named ``name`` (the seed's ``graph<T>(name)``; MEM-GRAPH-1).

    Raises:
        GraphError: ``name`` is empty, longer than 128 characters, or has spaces or
            control characters.
    """
    return Graph(name)
