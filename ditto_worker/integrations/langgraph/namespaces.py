"""``list_namespaces`` of :class:`~ditto_worker.integrations.langgraph.DittoStore`: pages of
namespace markers in LangGraph's order, never a scan of items or of every marker.

The markers' keys sort as their namespaces do (:func:`.records.namespace_key`), so one
QUERY of the key range of the prefix condition's fixed labels (those before its first
``*``), ``orderBy key``, with the other labels, the suffix and the depth as a filter on
the markers' metadata, reads the namespaces in the order LangGraph returns them: a call
reads ``offset + limit`` markers, not every marker. With ``max_depth`` the namespaces
cut to that depth arrive grouped; after a page the rest of its last group is skipped by
the next page's lower bound (:func:`.records.after`); such a page is small while pages
merge markers into one namespace (:data:`_GROUP_PAGE`). A store whose filters have no
ranges on ``key`` or that cannot order by ``key`` (``UNSUPPORTED_FILTER`` /
``UNSUPPORTED_ORDER_BY``) is asked for every marker under the prefix by its metadata
instead, sorted here.

Source: ``ListNamespacesOp`` / ``MatchCondition`` of ``langgraph.store.base``
(langgraph-checkpoint 4.3): results sorted, deduplicated after the ``max_depth`` cut,
then ``offset`` / ``limit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from langgraph.store.base import ListNamespacesOp, MatchCondition

from ditto_worker.contracts import MemoryItem
from ditto_worker.integrations.langgraph import records as rec
from ditto_worker.integrations.langgraph.writes import NodeCallError, Nodes

__all__ = ["list_namespaces"]

_PAGE_MAX: Final = 1000
"""The largest page of markers one QUERY asks for."""
_GROUP_PAGE: Final = 10
"""With ``max_depth``, the first page, and the next after a page whose markers cut to
fewer namespaces (``max_depth=1`` over 1,000 namespaces under one label reads 10 markers,
then skips the group, not ``limit`` markers of it)."""
_UNORDERED: Final = frozenset({"UNSUPPORTED_FILTER", "UNSUPPORTED_ORDER_BY"})


def list_namespaces(nodes: Nodes, op: ListNamespacesOp) -> list[tuple[str, ...]]:
    """The namespaces ``op`` asks for, as LangGraph's stores answer it.

    Raises:
        NodeCallError: a failed QUERY (other than the store lacking key ranges / order).
    """
    conditions = list(op.match_conditions or ())
    try:
        return _ordered(nodes, op, conditions)
    except NodeCallError as exc:
        if exc.code not in _UNORDERED:
            raise
    return _sorted_here(nodes, op, conditions)


def _ordered(
    nodes: Nodes, op: ListNamespacesOp, conditions: Sequence[MatchCondition]
) -> list[tuple[str, ...]]:
    """Pages of markers in key order until ``offset + limit`` namespaces are found."""
    span = rec.marker_range(_fixed(conditions))
    fixed = _fixed(conditions)
    labels = [term for term in _label_terms(conditions) if not _implied(term, fixed)]
    want = op.offset + op.limit
    found: list[tuple[str, ...]] = []
    bound: dict[str, str] = {"$gte": span["$gte"]}
    grouped = op.max_depth is not None  # markers may cut to fewer namespaces: a small page
    while len(found) < want:
        size = min(max(want - len(found), 1), _GROUP_PAGE if grouped else _PAGE_MAX)
        flt = {"$and": [{"key": {**bound, "$lt": span["$lt"]}}, *labels]}
        query = {"filter": flt, "limit": size, "orderBy": [{"field": "key", "direction": "asc"}]}
        page: list[MemoryItem] = nodes.call("MEMORY.QUERY", query).items
        merged = [_add(found, record, op, conditions) for record in page].count(False)
        grouped = grouped and merged > 0
        if len(page) < size:
            break
        last = _namespace(page[-1]) or ()
        if (
            op.max_depth is not None
            and len(last) > op.max_depth
            and found[-1:] == [last[: op.max_depth]]
        ):  # the rest of its group cuts to the same namespace
            bound = {"$gte": rec.after(rec.namespace_key(last[: op.max_depth]))}
        else:
            bound = {"$gt": page[-1].key or ""}
    return found[op.offset : want]


def _add(
    found: list[tuple[str, ...]],
    record: MemoryItem,
    op: ListNamespacesOp,
    conditions: Sequence[MatchCondition],
) -> bool | None:
    """Append the namespace of a marker (cut to ``max_depth``) unless it repeats the last;
    ``False`` when it did (merged), ``None`` when the marker does not match."""
    namespace = _namespace(record)
    if namespace is None or not all(_matches(namespace, c.match_type, c.path) for c in conditions):
        return None
    if op.max_depth is not None:
        namespace = namespace[: op.max_depth]
    if found and found[-1] == namespace:
        return False
    found.append(namespace)
    return True


def _namespace(record: MemoryItem) -> tuple[str, ...] | None:
    """The namespace of a marker; ``None`` for another record in the markers' key range
    (one the host wrote there itself)."""
    metadata = record.metadata or {}
    return rec.namespace_of(metadata) if metadata.get("kind") == rec.NAMESPACE else None


def _sorted_here(
    nodes: Nodes, op: ListNamespacesOp, conditions: Sequence[MatchCondition]
) -> list[tuple[str, ...]]:
    """Every marker under the fixed prefix by its metadata, matched and sorted here."""
    found: set[tuple[str, ...]] = set()
    flt = {"kind": rec.NAMESPACE, **rec.prefix_filter(_fixed(conditions))}
    for record in nodes.records(flt):
        namespace = rec.namespace_of(record.metadata or {})
        if all(_matches(namespace, c.match_type, c.path) for c in conditions):
            found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
    return sorted(found)[op.offset : op.offset + op.limit]


def _fixed(conditions: Sequence[MatchCondition]) -> list[str]:
    """The labels of the first prefix condition before its first ``*``."""
    for condition in conditions:
        if condition.match_type == "prefix":
            fixed: list[str] = []
            for label in condition.path:
                if label == "*":
                    break
                fixed.append(label)
            return fixed
    return []


def _label_terms(conditions: Sequence[MatchCondition]) -> list[dict[str, Any]]:
    """Every condition as terms of our filter on a marker's metadata (labels, depth)."""
    terms: list[dict[str, Any]] = []
    for condition in conditions:
        path = list(condition.path)
        names = [f"ns.p{i}" for i in range(len(path))]
        if condition.match_type != "prefix":
            names = [f"sx.s{len(path) - 1 - i}" for i in range(len(path))]
        terms += [{name: label} for name, label in zip(names, path, strict=True) if label != "*"]
        if path:
            terms.append({"nd": {"$gte": len(path)}})
    return terms


def _implied(term: dict[str, Any], fixed: Sequence[str]) -> bool:
    """Whether the key range of the ``fixed`` labels already holds ``term``."""
    ((name, value),) = term.items()
    if name == "nd":
        return bool(value["$gte"] <= len(fixed))
    return name.startswith("ns.p") and int(name[4:]) < len(fixed) and fixed[int(name[4:])] == value


def _matches(namespace: tuple[str, ...], kind: str, path: Sequence[str]) -> bool:
    """LangGraph's namespace match: ``path`` (``*`` any label) at its start or end."""
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if kind == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == label for p, label in zip(path, part, strict=True))
