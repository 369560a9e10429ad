"""In-process retrieval evaluation on LoCoMo: evidence recall@5/@10 and latency per strategy.

Each conversation is written into a fresh SQLite store with an embedder: every turn is one
memory whose content is exactly the turn text, metadata ``speaker``, ``session``, ``date``,
``dia_id`` and ``turn`` (the turn number of ``dia_id`` "D<session>:<turn>"). Every question
with evidence is then searched per strategy through the SDK (``create_memory``) over
:func:`~ditto_worker.retrieval.search.create_retrieval_memory_search_provider`. Evidence
recall@k (Maharana et al., ACL 2024): the share of a question's evidence dia_ids among the
top k results, averaged over questions; per category too (1 multi-hop, 2 temporal, 3
open-domain, 4 single-hop, 5 adversarial). Latency: each search call, ms.

Run: ``python -m ditto_worker.cli.eval /work/shared/data/locomo/30.json …``.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from ditto_worker.cli.demo import Conversation, evidence_recall, load_conversation
from ditto_worker.cli.eval_dates import resolved_dates
from ditto_worker.contracts import NodeResult
from ditto_worker.errors import DittoError
from ditto_worker.memory.core import create_memory
from ditto_worker.retrieval.embed import EmbeddingProvider
from ditto_worker.retrieval.search import create_retrieval_memory_search_provider
from ditto_worker.retrieval.settings import RetrievalConfig
from ditto_worker.scope import Scope

__all__ = [
    "CONVERSATION_PIPELINE",
    "EvalError",
    "EvalReport",
    "ScopedMemory",
    "StrategyReport",
    "evaluate_conversation",
    "evaluate_shared_store",
    "format_reports",
]

CONVERSATION_PIPELINE: Final = RetrievalConfig.model_validate(
    {
        "candidates": 200,
        "fusion": {"method": "weighted", "weights": {"keyword": 0.8, "vector": 0.2}},
        "mention": {"fields": ["speaker"], "weight": 0.1},
        "context": {"groupField": "session", "orderField": "turn", "window": 2,
                    "neighbourWeight": 0.3, "groupWeight": 0.3, "groupTop": 3, "expand": 20},
    }
)  # fmt: skip
"""Hybrid settings for memories of conversations whose metadata carries ``speaker``,
``session`` and ``turn`` (any chat log; nothing LoCoMo-only). Chosen by
``ditto-worker eval locomo --leave-one-out`` (:mod:`ditto_worker.cli.tuning`, issue 28
item 7): the grid's choice on one file beat plain reciprocal-rank fusion on the other in
both folds (R@10 0.806 vs 0.719 on 30.json, 0.810 vs 0.695 on 26.json; both legs search
without the speaker names the question mentions, ``mention.stripFromKeywordQuery``), so a
tuned setting may ship; this one is the grid's best over both files (0.843 / 0.810
in-sample). docs/retrieval.md "Leave-one-out" has the table."""

STRATEGIES: Final = ("keyword", "vector", "hybrid")
INDEX_FIELDS: Final = ("speaker",)
"""The eval store's ``indexFields``: each turn is indexed and embedded as
``"<speaker>: <text>"`` (issue 19; ``ditto_worker.memory.indexing``)."""
_DIA: Final = re.compile(r"D(\d+):(\d+)")


class MemoryCalls(Protocol):
    """What the evaluation calls: the SDK (:class:`Memory`) or the fleet (``FleetMemory``)."""

    def write(self, input: dict[str, Any]) -> NodeResult[Any]: ...

    def search(self, input: dict[str, Any]) -> NodeResult[Any]: ...


class EvalError(DittoError):
    """A write or search of the evaluation did not succeed (its error in the message)."""


@dataclass
class StrategyReport:
    """One strategy on one conversation. Recalls in [0, 1]; latencies in ms; each ``None``
    (``unknown`` in the table) when no question had evidence — unknown, not 0."""

    strategy: str
    questions: int
    recall_at_5: float | None
    recall_at_10: float | None
    per_category: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    """category -> (questions, recall@5, recall@10)."""
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    recall_at_k: list[float] = field(default_factory=list)
    """Mean evidence recall@k for k = 1 … 10 (index k - 1); empty without questions."""
    latencies_ms: list[float] = field(default_factory=list)
    """Every search call's latency, ms, in question order (the plot's distribution)."""


@dataclass
class EvalReport:
    """All strategies on one conversation; ``ingest_s`` is the write time, seconds."""

    conversation: str
    turns: int
    ingest_s: float
    strategies: dict[str, StrategyReport] = field(default_factory=dict)


def _turn_number(dia_id: str) -> int | None:
    match = _DIA.fullmatch(dia_id)
    return int(match.group(2)) if match else None


def turn_drafts(conv: Conversation) -> list[dict[str, Any]]:
    """One MEMORY.WRITE draft per turn: content is the turn text, nothing else; a turn
    that shares an image also has metadata ``image``, the image's caption, and a turn
    naming a relative date ("yesterday", "last Saturday") metadata ``when``, the dates
    it names seen from the session date (:func:`~ditto_worker.cli.eval_dates.resolved_dates`,
    e.g. "7 May 2023"). Neither is indexed unless ``indexFields`` names it."""
    drafts = []
    for t in conv.turns:
        metadata = {"speaker": t.speaker, "session": t.session, "date": t.date,
                    "dia_id": t.dia_id, "turn": _turn_number(t.dia_id)}  # fmt: skip
        if t.caption:
            metadata["image"] = t.caption
        if when := resolved_dates(t.text, t.date):
            metadata["when"] = ", ".join(when)
        drafts.append({"content": t.text, "metadata": metadata})
    return drafts


def ingest(memory: MemoryCalls, conv: Conversation, batch_size: int = 128) -> dict[str, str]:
    """Write every turn (batches of ``batch_size``); returns {memory id: dia_id}.

    Raises:
        EvalError: a WRITE did not succeed.
    """
    drafts = turn_drafts(conv)
    dia_by_id: dict[str, str] = {}
    for start in range(0, len(drafts), batch_size):
        chunk = drafts[start : start + batch_size]
        result = memory.write({"memories": chunk})
        if result.status != "success" or result.output is None:
            raise EvalError(f"MEMORY.WRITE {result.status}: {result.error}")
        for item, draft in zip(result.output, chunk, strict=True):
            dia_by_id[item.id] = draft["metadata"]["dia_id"]
    return dia_by_id


def _percentile(values: Sequence[float], share: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else None


def evaluate_strategy(
    memory: MemoryCalls, conv: Conversation, dia_by_id: dict[str, str], strategy: str
) -> StrategyReport:
    """Search every question with evidence (limit 10) and measure recall and latency.

    Raises:
        EvalError: a SEARCH did not succeed.
    """
    asked = [q for q in conv.questions if q.evidence]
    recalls: dict[int, list[tuple[float, float]]] = defaultdict(list)
    curves: list[list[float]] = []
    latencies: list[float] = []
    for question in asked:
        start = time.perf_counter()
        result = memory.search({"query": question.question, "strategy": strategy, "limit": 10})
        latencies.append((time.perf_counter() - start) * 1000)
        if result.status != "success" or result.output is None:
            raise EvalError(f"MEMORY.SEARCH {strategy} {result.status}: {result.error}")
        found = [dia_by_id.get(hit.memory.id, "") for hit in result.output]
        curve = [evidence_recall(found, question.evidence, k) for k in range(1, 11)]
        curves.append(curve)
        recalls[question.category].append((curve[4], curve[9]))
    every = [pair for pairs in recalls.values() for pair in pairs]
    return StrategyReport(
        strategy=strategy,
        questions=len(every),
        recall_at_5=statistics.fmean(r5 for r5, _ in every) if every else None,
        recall_at_10=statistics.fmean(r10 for _, r10 in every) if every else None,
        per_category={
            category: (
                len(pairs),
                statistics.fmean(a for a, _ in pairs),
                statistics.fmean(b for _, b in pairs),
            )
            for category, pairs in sorted(recalls.items())
        },  # fmt: skip
        latency_p50_ms=statistics.median(latencies) if latencies else None,
        latency_p95_ms=_percentile(latencies, 0.95),
        recall_at_k=[statistics.fmean(column) for column in zip(*curves, strict=True)],
        latencies_ms=latencies,
    )


def evaluate_conversation(
    path: str | Path,
    embedder: EmbeddingProvider,
    config: RetrievalConfig | None = None,
    strategies: Sequence[str] = STRATEGIES,
    workdir: str | Path | None = None,
    index_fields: Sequence[str] = INDEX_FIELDS,
) -> EvalReport:
    """Ingest one LoCoMo conversation into a fresh SQLite store and evaluate strategies.

    Args:
        path: a LoCoMo conversation file (``data/locomo/README.md`` format).
        embedder: the embedding provider (the store's and the query's).
        config: hybrid settings (default :data:`CONVERSATION_PIPELINE`).
        strategies: strategy names to run (``keyword``, ``vector``, ``hybrid``).
        workdir: folder for the temporary database (default: a new temp folder, removed).

    Raises:
        EvalError: a write or search failed.
    """
    from ditto_plugin_sqlite import SqliteMemoryStore  # the embedded default store

    conv = load_conversation(path)
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        store = SqliteMemoryStore(
            Path(folder) / "eval.sqlite", embedder=embedder, index_fields=index_fields
        )
        try:
            search = create_retrieval_memory_search_provider(
                store, embedder, config or CONVERSATION_PIPELINE
            )
            memory = create_memory(store, search)
            start = time.perf_counter()
            dia_by_id = ingest(memory, conv)
            report = EvalReport(conv.name, len(conv.turns), time.perf_counter() - start)
            for strategy in strategies:
                report.strategies[strategy] = evaluate_strategy(memory, conv, dia_by_id, strategy)
        finally:
            store.close()
    return report


class ScopedMemory:
    """The SDK's ``write``/``search`` in one tenant scope (:class:`MemoryCalls`)."""

    def __init__(self, memory: Any, scope: Scope) -> None:
        self.memory, self.scope = memory, scope

    def write(self, input: dict[str, Any]) -> NodeResult[Any]:
        """MEMORY.WRITE in :attr:`scope`."""
        result: NodeResult[Any] = self.memory.write(input, scope=self.scope)
        return result

    def search(self, input: dict[str, Any]) -> NodeResult[Any]:
        """MEMORY.SEARCH in :attr:`scope`."""
        result: NodeResult[Any] = self.memory.search(input, scope=self.scope)
        return result


def evaluate_shared_store(
    paths: Sequence[str | Path],
    embedder: EmbeddingProvider,
    config: RetrievalConfig | None = None,
    strategies: Sequence[str] = STRATEGIES,
    workdir: str | Path | None = None,
    index_fields: Sequence[str] = INDEX_FIELDS,
) -> list[EvalReport]:
    """The same evaluation with every conversation in its own scope of ONE SQLite store
    (issue 19: a tenant's recall must not depend on the other tenants' text).

    All conversations are written first (each as tenant ``eval``, user ``<file stem>``),
    then each is evaluated in its scope. Conversation names get ``@shared``.

    Raises:
        EvalError: a write or search failed.
    """
    from ditto_plugin_sqlite import SqliteMemoryStore

    convs = [load_conversation(path) for path in paths]
    reports: list[EvalReport] = []
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        store = SqliteMemoryStore(
            Path(folder) / "shared.sqlite", embedder=embedder, index_fields=index_fields
        )
        try:
            search = create_retrieval_memory_search_provider(
                store, embedder, config or CONVERSATION_PIPELINE
            )
            memory = create_memory(store, search)
            scoped = [ScopedMemory(memory, Scope("eval", f"c{i}")) for i in range(len(convs))]
            ingested = []
            for calls, conv in zip(scoped, convs, strict=True):
                start = time.perf_counter()
                ingested.append((ingest(calls, conv), time.perf_counter() - start))
            for calls, conv, (dia_by_id, seconds) in zip(scoped, convs, ingested, strict=True):
                report = EvalReport(f"{conv.name}@shared", len(conv.turns), seconds)
                for strategy in strategies:
                    report.strategies[strategy] = evaluate_strategy(
                        calls, conv, dia_by_id, strategy
                    )
                reports.append(report)
        finally:
            store.close()
    return reports


def _figure(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``unknown`` for ``None`` (never a made-up 0)."""
    return "unknown" if value is None else format(value, spec)


def format_reports(reports: Sequence[EvalReport]) -> str:
    """A plain-text table: one row per conversation and strategy, categories after
    (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial)."""
    lines = ["conversation  strategy  n    R@5    R@10   p50 ms  p95 ms  "
             "category:R@5/R@10(questions)"]  # fmt: skip
    for report in reports:
        for item in report.strategies.values():
            cats = "  ".join(
                f"{c}:{r5:.2f}/{r10:.2f}({n})" for c, (n, r5, r10) in item.per_category.items()
            )
            lines.append(
                f"{report.conversation:<13} {item.strategy:<9} {item.questions:<4} "
                f"{_figure(item.recall_at_5, '.3f'):>5}  {_figure(item.recall_at_10, '.3f'):>5}  "
                f"{_figure(item.latency_p50_ms, '.1f'):>6}  "
                f"{_figure(item.latency_p95_ms, '.1f'):>6}  {cats}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ditto_worker.cli.eval PATH…`` with the local model; prints the table."""
    from ditto_worker.retrieval.embed import LocalEmbeddingProvider

    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m ditto_worker.cli.eval LOCOMO.json ...", file=sys.stderr)
        return 2
    embedder = LocalEmbeddingProvider()
    reports = [evaluate_conversation(path, embedder) for path in paths]
    print(format_reports(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
