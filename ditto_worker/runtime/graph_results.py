"""What a Graph run and a loop of Graphs return (SPEC.md MEM-GRAPH-2..5).

:class:`GraphResult` is what ``Runtime.run`` returns, :class:`LoopResult` what
``Runtime.loop`` returns; both are wire models (``to_wire(result)`` is their JSON form).
:mod:`ditto_worker.runtime.graphs` re-exports every name here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ditto_worker.contracts import ErrorInfo, NodeResult, _Wire

__all__ = ["GraphResult", "GraphStatus", "LoopResult"]

GraphStatus = Literal["success", "failed", "cancelled", "timeout"]
"""``success`` only if every node succeeded; ``cancelled`` / ``timeout`` when the run was
cancelled / ran past its deadline; ``failed`` otherwise (MEM-GRAPH-2)."""

if TYPE_CHECKING:
    _AnyResult = NodeResult[Any]
else:  # the bare generic: parametrising it here would build NodeResult's schema at import
    _AnyResult = NodeResult


class GraphResult(_Wire):
    """What ``Runtime.run`` returns (MEM-GRAPH-3, MEM-GRAPH-5).

    Built by the runtime without re-validation (the NodeResults keep their node's output
    type); ``to_wire(result)`` is its JSON form.
    """

    run_id: str = Field(description="The run's id (the ``ditto_run_id`` header of its calls).")
    graph: str = Field(description="The Graph's name.")
    status: GraphStatus = Field(description="success | failed | cancelled | timeout.")
    results: dict[str, _AnyResult] = Field(
        description="Every node's NodeResult by node id, in node order. A node that did not "
        "start has one too: failed/GRAPH_BIND_FAILED (its bind raised, or a dep did not "
        "start), cancelled/GRAPH_CANCELLED or timeout/GRAPH_TIMEOUT (the run stopped first)."
    )
    deps: dict[str, list[str]] = Field(
        description="The dependency edges: node id -> the ids it depends on."
    )
    error: ErrorInfo | None = Field(
        default=None,
        description="GRAPH_CANCELLED / GRAPH_TIMEOUT when the run was cancelled / timed out; "
        "when it failed, the first node to end without success: its code (e.g. "
        "MEMORY_BACKEND_ERROR, GRAPH_BIND_FAILED) and a message naming the node id, its node "
        "type and its error message. None on success.",
    )

    @property
    def failed_nodes(self) -> list[str]:
        """Ids of the nodes whose result is not ``success``, in node order."""
        return [node for node, result in self.results.items() if result.status != "success"]


class LoopResult(_Wire):
    """What ``Runtime.loop`` returns (MEM-GRAPH-4)."""

    run_id: str = Field(description="The loop's id; its Graphs run as ``<run_id>.<n>``.")
    status: GraphStatus = Field(
        description="success: the plan returned; failed: it raised a NodeError (e.g. "
        "GRAPH_BUDGET_EXHAUSTED); cancelled / timeout: the loop was."
    )
    output: Any = Field(default=None, description="The plan's return value (on success).")
    graphs: list[GraphResult] = Field(description="Every Graph the loop ran, in order.")
    budget: int = Field(description="The loop's budget, Graphs.")
    error: ErrorInfo | None = Field(default=None, description="Set when status is not success.")
