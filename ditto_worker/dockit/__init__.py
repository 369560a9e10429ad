"""The document-store kit: what the Qdrant and Milvus stores share, in one core.

As the SQL store kit (:mod:`ditto_worker.sqlkit`) does for the SQL stores, a document
store plugin keeps only its client calls (its payload or row layout, its conditions, its
requests); the kit holds the rest:

* :mod:`.shadow`: the record mapping's shared parts: typed shadow fields of metadata
  (:func:`shadow_fields`, :func:`field_hash`), stored instants (:func:`iso`,
  :func:`time_bound`, :func:`time_value`) and the store's sequence (:class:`Clock`).
* :mod:`.translate`: filter → the store's conditions (:func:`translate` over an
  :class:`ExpressionDialect`).
* :mod:`.paging`: reads: QUERY pages over one stored instant (:func:`time_order`,
  :class:`TimeOrder`), ranked SEARCH candidates (:func:`ranked`), GET's order
  (:func:`by_creation`).
* :mod:`.calls`: one step of a memory call (:func:`check_step`, :func:`step_timeout`).
* :mod:`.reindex`: re-embedding through an alias (:func:`switch`, :func:`keep_target`,
  :func:`finish_cut_switch` over :class:`AliasedCollections`).

It sits in the SDK's plugin-author layer beside the SQL kit: plugins import it, it
imports nothing above :mod:`ditto_worker.memory`.
"""

from __future__ import annotations

from ditto_worker.dockit.calls import cancelled, check_step, deadline_passed, step_timeout
from ditto_worker.dockit.paging import TIE_CAP, After, TimeOrder, by_creation, ranked, time_order
from ditto_worker.dockit.reindex import AliasedCollections, finish_cut_switch, keep_target, switch
from ditto_worker.dockit.shadow import (
    TIME_FIELDS,
    Clock,
    field_hash,
    iso,
    parse_us,
    shadow_fields,
    time_bound,
    time_value,
)
from ditto_worker.dockit.translate import ExpressionDialect, translate

__all__ = [
    "TIE_CAP",
    "TIME_FIELDS",
    "After",
    "AliasedCollections",
    "Clock",
    "ExpressionDialect",
    "TimeOrder",
    "by_creation",
    "cancelled",
    "check_step",
    "deadline_passed",
    "field_hash",
    "finish_cut_switch",
    "iso",
    "keep_target",
    "parse_us",
    "ranked",
    "shadow_fields",
    "step_timeout",
    "switch",
    "time_bound",
    "time_order",
    "time_value",
    "translate",
]
