"""The merge rule of ``CONTEXT.UPDATE`` and the size limits (SPEC.md MEM-CTX-1/2).

Pure functions, no I/O; the pure mode, the in-process cache and the Redis cache's Lua
script all follow the same rule:

* an ingress item whose id is already in the context replaces that item in place;
* an ingress item with a new id is appended, in ingress order;
* nothing else changes (no reordering, no removal, no dedupe of content).

Ingress items are applied one after the other, so an id repeated *within* one ingress
ends as its last occurrence, at the position its first occurrence took (appended, or
the existing item's place). :func:`collapse_ingress` gives that in one step.

Sizes are the UTF-8 bytes of an item's compact wire JSON (:func:`item_json`); over a
limit is ``INVALID_INPUT`` naming the limit, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ditto_worker.config.context import ContextLimits
from ditto_worker.context.contracts import ContextItem
from ditto_worker.errors import ErrorCode, NodeError

__all__ = [
    "check_ingress",
    "check_merged",
    "collapse_ingress",
    "invalid_input",
    "item_json",
    "merge_items",
    "merged_over_limit",
    "over_limit",
]


def invalid_input(message: str) -> NodeError:
    """An ``INVALID_INPUT`` error whose message names the field or limit at fault."""
    return NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: {message}")


def over_limit(limit: str, what: str, bound: int) -> NodeError:
    """``INVALID_INPUT`` for a context over ``workers.context.<limit>`` (``bound``)."""
    return invalid_input(f"{what}, over the limit workers.context.{limit} ({bound})")


def merged_over_limit(limit: str, value: int, limits: ContextLimits) -> NodeError:
    """``INVALID_INPUT`` for a cached context that the update would take over ``limit``
    (``maxItems``: ``value`` items; ``maxContextBytes``: ``value`` bytes). The one message
    of both caches."""
    if limit == "maxItems":
        return over_limit(limit, f"the merged context would have {value} items", limits.max_items)
    return over_limit(limit, f"the merged context would be {value} bytes", limits.max_context_bytes)


def item_json(item: ContextItem) -> str:
    """The item's compact wire JSON (camelCase, unset ``metadata`` omitted); its UTF-8
    length is the item's size."""
    return item.model_dump_json(by_alias=True)


def merge_items(items: Sequence[ContextItem], ingress: Iterable[ContextItem]) -> list[ContextItem]:
    """Merge ``ingress`` into ``items`` by the module's rule.

    Args:
        items: the context, ids distinct.
        ingress: items to apply, in order (ids may repeat).

    Returns:
        A new list: ``items`` with same-id items replaced in place, then the new ids in
        the order of their first ingress occurrence. ``items`` is not modified.
    """
    merged = list(items)
    index = {item.id: i for i, item in enumerate(merged)}
    for item in ingress:
        at = index.get(item.id)
        if at is None:
            index[item.id] = len(merged)
            merged.append(item)
        else:
            merged[at] = item
    return merged


def collapse_ingress(ingress: Iterable[ContextItem]) -> list[ContextItem]:
    """One item per id: the last occurrence's value, in the order of first occurrences
    (merging the result equals merging ``ingress`` item by item)."""
    last: dict[str, ContextItem] = {}
    for item in ingress:
        last[item.id] = item
    return list(last.values())


def check_ingress(
    ingress: Sequence[ContextItem], limits: ContextLimits
) -> list[tuple[ContextItem, str]]:
    """Collapse ``ingress`` and check what can be known before reading the context.

    Returns:
        ``(item, item_json(item))`` per distinct id, in merge order.

    Raises:
        NodeError: ``INVALID_INPUT`` naming ``maxItemBytes`` (an item too large, by its
            ingress index), ``maxItems`` (more distinct ids than a context may hold) or
            ``maxContextBytes`` (the distinct items alone are too large).
    """
    for index, item in enumerate(ingress):
        size = len(item_json(item).encode())
        if size > limits.max_item_bytes:
            raise over_limit(
                "maxItemBytes", f"ingress[{index}] is {size} bytes", limits.max_item_bytes
            )
    collapsed = [(item, item_json(item)) for item in collapse_ingress(ingress)]
    if len(collapsed) > limits.max_items:
        raise over_limit("maxItems", f"ingress has {len(collapsed)} distinct ids", limits.max_items)
    total = sum(len(text.encode()) for _, text in collapsed)
    if total > limits.max_context_bytes:
        raise over_limit(
            "maxContextBytes", f"ingress items are {total} bytes", limits.max_context_bytes
        )
    return collapsed


def check_merged(items: Sequence[ContextItem], limits: ContextLimits, where: str) -> None:
    """Check a whole context against ``limits``.

    Args:
        items: the context (e.g. a merge result).
        where: how the message names it (``"context.items"``, ``"the merged context"``).

    Raises:
        NodeError: ``INVALID_INPUT`` naming ``maxItemBytes``, ``maxItems`` or
            ``maxContextBytes``.
    """
    if len(items) > limits.max_items:
        raise over_limit("maxItems", f"{where} has {len(items)} items", limits.max_items)
    total = 0
    for index, item in enumerate(items):
        size = len(item_json(item).encode())
        if size > limits.max_item_bytes:
            raise over_limit(
                "maxItemBytes", f"{where}[{index}] is {size} bytes", limits.max_item_bytes
            )
        total += size
    if total > limits.max_context_bytes:
        raise over_limit("maxContextBytes", f"{where} is {total} bytes", limits.max_context_bytes)
