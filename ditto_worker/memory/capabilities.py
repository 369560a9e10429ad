"""What a store plugin declares it supports: :class:`StoreCapabilities`.

A plugin sets a class attribute ``capabilities: ClassVar[StoreCapabilities]``. The
conformance suite (:mod:`ditto_worker.testing.conformance`) tests every declared
capability and checks that what is *not* declared fails explicitly (``UNSUPPORTED_FILTER``,
``UNSUPPORTED_ORDER_BY``, ``UNSUPPORTED_STRATEGY``, an error for an oversized batch), never
silently (SPEC.md MEM-QUERY-3, MEM-SEARCH-2, MEM-WRITE-3, MEM-PY-11).

Field names of ``filter_fields``/``order_by_fields`` are the filter language's
(:mod:`ditto_worker.memory.filters`): the reserved record fields ``id``, ``key``, ``createdAt``,
``updatedAt``, plus :data:`METADATA_FIELDS` meaning "any metadata path, dots included".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ditto_worker.errors import ConfigError

__all__ = [
    "ALL_FILTER_OPERATORS",
    "METADATA_FIELDS",
    "RESERVED_FIELDS",
    "StoreCapabilities",
    "transactional_capabilities",
]

ALL_FILTER_OPERATORS: Final = frozenset(
    {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$and", "$or"}
)
"""Every operator of the shared filter language (MEM-PY-5)."""

METADATA_FIELDS: Final = "metadata.*"
"""Token in ``filter_fields``/``order_by_fields``: any metadata path (``topic``, ``a.b``)."""

RESERVED_FIELDS: Final = frozenset({"id", "key", "createdAt", "updatedAt"})
"""The reserved record fields of the filter language."""

_ALL_FIELDS: Final = RESERVED_FIELDS | {METADATA_FIELDS}


@dataclass(frozen=True)
class StoreCapabilities:
    """A plugin's declared behaviour; the conformance suite holds it to every field.

    Attributes:
        filter_operators: operators QUERY/SEARCH accept (subset of
            :data:`ALL_FILTER_OPERATORS`); others must raise ``UNSUPPORTED_FILTER``.
        filter_fields: fields a filter may name (reserved names and/or
            :data:`METADATA_FIELDS`); others must raise ``UNSUPPORTED_FILTER``.
        order_by_fields: fields ``orderBy`` accepts, same vocabulary; others must raise
            ``UNSUPPORTED_ORDER_BY``.
        string_range_fields: fields on which ``$gt``/``$gte``/``$lt``/``$lte`` accept a
            string bound (same vocabulary; default: every field). A string bound on
            another field must raise ``UNSUPPORTED_FILTER`` (a store without a
            lexicographic range, e.g. Qdrant); number bounds are unaffected.
        search_strategies: strategy names SEARCH accepts (empty: no native search);
            others must raise ``UNSUPPORTED_STRATEGY`` (MEM-SEARCH-2).
        default_strategy: the strategy run when a request names none (one of
            ``search_strategies``), or ``None`` when a strategy is required.
        keyword_strategy: the strategy doing text keyword search over ``content`` (one
            of ``search_strategies``), or ``None``.
        keyword_cjk: keyword search finds Chinese/Japanese text written without spaces
            by a 2-character query.
        keyword_scope_statistics: keyword scores use the statistics of the call's
            scope alone (document frequencies, record count, lengths): a tenant's
            scores do not change when another tenant writes (issue 19).
        exhaustive_strategies: strategies that rank every record passing the filter
            (e.g. exact vector search) for a text query: SEARCH returns exactly
            ``min(limit, matching records)``, never fewer (filter before limit).
        key_conflict: ``"error"``: a WRITE whose key is taken (or repeated in the batch)
            raises ``CONFLICT``; ``"replace"``: the new record replaces the one holding
            the key (MEM-WRITE-3; a conflict never silently drops an input).
        batch_atomic: a WRITE/UPDATE/DELETE batch commits all or nothing (MEM-PY-11).
        partial_commit: when ``batch_atomic`` is false, what a failed batch leaves
            behind (required then, MEM-PY-11).
        max_batch_size: the largest batch a mutation accepts (``None``: no limit); a
            larger one must fail explicitly and write nothing.
        cancel: a call whose ``options.cancel`` token is set stops with
            ``MEMORY_CANCELLED`` and commits nothing (MEM-RUN-2).
        search_options: the keys of SEARCH ``options`` the store's search reads (none by
            default). The SDK refuses any other key with ``INVALID_INPUT`` naming it,
            before the plugin is called, so an option is never silently ignored
            (issue 13). A search provider without a :class:`StoreCapabilities` gets its
            options unchecked (e.g. a remote one whose far side checks them).
        scope: the store confines every operation to ``options.scope`` (an exact match
            on its namespace, :mod:`ditto_worker.scope`; keys unique per scope). The SDK
            refuses a scoped call to a store that does not declare it
            (``PERMISSION_DENIED``).
        operation_ids: WRITE/UPDATE/DELETE with ``options.operation_id`` apply at most once
            per namespace, keep the id with the records written, and answer the same id
            with another input ``CONFLICT`` (MEM-RUN-7,
            :mod:`ditto_worker.memory.operations`). The SDK refuses an operation id to a
            store that does not declare it (``UNSUPPORTED``, nothing applied).
        conditional_update: UPDATE entries' ``ifMetadata`` is checked atomically with the
            write; a failed condition is ``CONFLICT`` with nothing of the batch written
            (MEM-UPDATE-5). The SDK refuses ``ifMetadata`` to a store that does not
            declare it (``UNSUPPORTED``, nothing applied).
        extras: informational flags (e.g. ``multi_process``); not tested by the suite.

    Raises:
        ConfigError: an unknown operator or field, a default/keyword/exhaustive strategy
            that is not declared, a non-positive ``max_batch_size``, or a non-atomic store without a
            ``partial_commit`` description.
    """

    filter_operators: frozenset[str] = ALL_FILTER_OPERATORS
    filter_fields: frozenset[str] = _ALL_FIELDS
    order_by_fields: frozenset[str] = _ALL_FIELDS
    string_range_fields: frozenset[str] = _ALL_FIELDS
    search_strategies: tuple[str, ...] = ()
    default_strategy: str | None = None
    keyword_strategy: str | None = None
    keyword_cjk: bool = False
    keyword_scope_statistics: bool = False
    exhaustive_strategies: tuple[str, ...] = ()
    key_conflict: Literal["error", "replace"] = "error"
    batch_atomic: bool = True
    partial_commit: str = ""
    max_batch_size: int | None = None
    cancel: bool = True
    scope: bool = False
    operation_ids: bool = False
    conditional_update: bool = False
    search_options: frozenset[str] = frozenset()
    extras: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.filter_operators <= ALL_FILTER_OPERATORS:
            raise ConfigError(f"unknown filter operators {sorted(self.filter_operators)}")
        for name in ("filter_fields", "order_by_fields", "string_range_fields"):
            if not getattr(self, name) <= _ALL_FIELDS:
                raise ConfigError(f"{name}: use {sorted(_ALL_FIELDS)}")
        for name in ("default_strategy", "keyword_strategy"):
            value = getattr(self, name)
            if value is not None and value not in self.search_strategies:
                raise ConfigError(f"{name} {value!r} is not in search_strategies")
        if not set(self.exhaustive_strategies) <= set(self.search_strategies):
            raise ConfigError("exhaustive_strategies must be in search_strategies")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ConfigError("max_batch_size must be a positive integer or None")
        if not self.batch_atomic and not self.partial_commit:
            raise ConfigError("a store without atomic batches must describe partial_commit")

    @property
    def has_search(self) -> bool:
        """True when the store (or its declared provider) offers any SEARCH strategy."""
        return bool(self.search_strategies)


def transactional_capabilities(
    keyword: tuple[str, ...],
    extras: frozenset[str] = frozenset(),
    vector_options: frozenset[str] | None = None,
) -> StoreCapabilities:
    """What a transactional store declares (the SQL stores, the in-memory testing store):
    atomic batches, key conflicts as errors, cancel, scopes, operation ids, conditional
    updates, keyword search with per-scope statistics and CJK.

    Args:
        keyword: its keyword strategies, the default (``keyword``) first.
        extras: its extra capabilities (``multi_process``, ``driver_cancel`` …).
        vector_options: with an embedding provider, the SEARCH options its vector search
            reads: ``vector`` (exhaustive: ``min(limit, matches)`` results), ``hybrid``
            and ``embed_on_write`` are added; ``None``: keyword search only.
    """
    vectors = vector_options is not None
    more: dict[str, Any] = {}
    if vector_options is not None:
        more = {"exhaustive_strategies": ("vector",), "search_options": vector_options}
    return StoreCapabilities(
        search_strategies=keyword + (("vector", "hybrid") if vectors else ()),
        default_strategy=keyword[0],
        keyword_strategy="keyword",
        keyword_cjk=True,
        keyword_scope_statistics=True,
        key_conflict="error",
        batch_atomic=True,
        cancel=True,
        scope=True,
        operation_ids=True,
        conditional_update=True,
        extras=extras | {"embed_on_write"} if vectors else extras,
        **more,
    )
