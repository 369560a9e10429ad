"""A coalesced batch of MEMORY.GET calls read in one store call (issue 36 item 3).

A fleet batch (:mod:`ditto_worker.fleet.batch`) of GETs would make one store read per
call. Before its calls run, :func:`prefetch_gets` reads the union of their ids and keys
once per trusted scope (one ``keys IN (…)`` / ``ids IN (…)`` on the SQL stores, one
request on the others) and keeps each call's share of the records under its execution
id; each call then runs its whole envelope as before (its deadline, cancel flag,
validation, output checks), and its store read (:func:`read_get`) takes its share instead
of calling the store. A share is used only by the call it was read for: the same store,
the same execution id, the same trusted scope the call runs with and the same validated
input — anything else (a worker bound to another scope, a call whose input changed) reads
the store itself. What a call answers is what its own read would have answered:
:func:`~ditto_worker.memory.checks.finish_get` orders and checks its share exactly as it
does a store's output.

Left to each call's own read: a call alone in its scope, an input that is invalid or
asks for nothing, a store that cannot isolate a trusted scope (the call answers
``PERMISSION_DENIED``), a union read that failed or returned a record no call asked for
(each call then gets its own answer or error from the store).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from ditto_worker.contracts import MemoryGetInput, MemoryItem
from ditto_worker.errors import MemoryError
from ditto_worker.memory import checks
from ditto_worker.memory.ports import MemoryCallOptions, MemoryStore
from ditto_worker.scope import Scope

__all__ = ["BatchCall", "prefetch_gets", "read_get"]

log = logging.getLogger(__name__)


class BatchCall(Protocol):
    """One call of a batch as :func:`prefetch_gets` reads it
    (:class:`~ditto_worker.runtime.node_spec.BatchCall`)."""

    @property
    def execution_id(self) -> str: ...
    @property
    def input(self) -> Any: ...
    @property
    def scope(self) -> Scope | None: ...
    @property
    def deadline(self) -> float | None: ...


_Share = tuple[MemoryStore, Scope | None, MemoryGetInput, list[MemoryItem]]
_SHARES: Final[dict[str, _Share]] = {}
_LOCK: Final = threading.Lock()


def read_get(store: MemoryStore, data: MemoryGetInput, options: MemoryCallOptions) -> object:
    """The store read of one GET call: its prefetched share when one was read for exactly
    this call (module docstring), else ``store.get(data, options)``."""
    eid = options.execution_id
    with _LOCK:
        share = _SHARES.pop(eid, None) if _SHARES and eid is not None else None
    if share is not None:
        owner, scope, wanted, items = share
        if owner is store and scope == options.scope and wanted == data:
            return items
    return store.get(data, options)


def prefetch_gets(
    store: MemoryStore, isolates_scope: bool, calls: Sequence[BatchCall]
) -> Callable[[], None]:
    """Read the GETs of a batch in one store call per trusted scope; returns the function
    that drops the shares not taken (call it when the batch has run).

    Args:
        store: the memory store the calls read.
        isolates_scope: the store confines calls to a trusted scope (else a call with
            one is refused before it reads, and nothing is read for it here).
        calls: the batch's calls: execution id, raw input, the trusted scope each runs
            with, deadline.

    Never raises: a read that fails leaves its calls to read on their own.
    """
    groups: dict[Scope | None, list[tuple[BatchCall, MemoryGetInput]]] = {}
    for call in calls:
        try:
            data = checks.prepare_get(checks.parse_input(MemoryGetInput, call.input))
        except MemoryError:
            continue  # the call answers INVALID_INPUT itself
        if isinstance(data, MemoryGetInput) and (call.scope is None or isolates_scope):
            groups.setdefault(call.scope, []).append((call, data))
    taken: list[str] = []
    for scope, members in groups.items():
        if len(members) > 1:
            taken += _read_group(store, scope, members)

    def release() -> None:
        with _LOCK:
            for eid in taken:
                _SHARES.pop(eid, None)

    return release


def _read_group(
    store: MemoryStore, scope: Scope | None, members: list[tuple[BatchCall, MemoryGetInput]]
) -> list[str]:
    """One store read for the calls of one scope; their shares stored; their ids."""
    ids = checks.dedupe(i for _, data in members for i in data.ids or [])
    keys = checks.dedupe(k for _, data in members for k in data.keys or [])
    union = MemoryGetInput(ids=ids or None, keys=keys or None)
    deadlines = [call.deadline for call, _ in members]
    options = MemoryCallOptions(
        deadline=None if None in deadlines else max(d for d in deadlines if d is not None),
        execution_id=members[0][0].execution_id, scope=scope,
    )  # fmt: skip
    try:
        items = checks.output_list(MemoryItem, store.get(union, options))
    except Exception as exc:  # each call reads on its own and answers its own error
        log.warning("a batch read of MEMORY.GET failed (%s)", type(exc).__name__)
        return []
    wanted_ids, wanted_keys = set(ids), set(keys)
    if any(i.id not in wanted_ids and (i.key is None or i.key not in wanted_keys) for i in items):
        return []  # a record no call asked for: each call's own read says so
    shares: dict[str, _Share] = {}
    for call, data in members:
        mine_ids, mine_keys = set(data.ids or ()), set(data.keys or ())
        mine = [i for i in items if i.id in mine_ids or (i.key is not None and i.key in mine_keys)]
        shares[call.execution_id] = (store, scope, data, mine)
    with _LOCK:
        _SHARES.update(shares)
    return list(shares)
