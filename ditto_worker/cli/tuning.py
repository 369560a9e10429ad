"""Leave-one-out choice of the hybrid settings on LoCoMo (issue 28 item 7).

No weight, threshold or window may be chosen on the conversation it is scored on. For
every file, :func:`score_grid` scores each setting of :func:`candidate_grid` (evidence
recall@10 of ``hybrid``; :mod:`ditto_worker.cli.eval`); :func:`leave_one_out` then chooses,
for each file held out, the best setting on the *other* files and scores it on the held-out
one, beside plain reciprocal-rank fusion (:data:`PLAIN_RRF`), the shipped default and the
in-sample best (chosen on the held-out file itself: what a tuned figure would claim).

A setting other than plain RRF may be shipped only if the setting chosen without the
held-out file beats plain RRF on it in at least five folds of six (:func:`required_wins`:
every fold below six files; :func:`ship_decision`). The table ends with the mean and the
worst fold of each column (:func:`fold_summary`).

To make a grid affordable on two cores, a conversation is written once, every text is
embedded once (:class:`CachingEmbedder`), every identical store search is answered once and
the context stage's neighbour QUERY from one listing of the store (:class:`MemoSource`,
:mod:`ditto_worker.cli.eval_cache`); only fusion and scoring run per setting.
"""

from __future__ import annotations

import itertools
import math
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ditto_worker.cli.demo import evidence_recall, load_conversation
from ditto_worker.cli.eval_cache import CachingEmbedder, MemoSource
from ditto_worker.contracts import MemorySearchInput
from ditto_worker.memory.core import create_memory
from ditto_worker.memory.ports import EmbeddingProvider
from ditto_worker.retrieval.search import RetrievalSearchProvider
from ditto_worker.retrieval.settings import RetrievalConfig

__all__ = [
    "PLAIN_RRF",
    "CachingEmbedder",
    "Fold",
    "MemoSource",
    "best_setting",
    "candidate_grid",
    "fold_summary",
    "format_leave_one_out",
    "leave_one_out",
    "required_wins",
    "rule_grid",
    "score_grid",
    "setting_name",
    "ship_decision",
]

_MENTION: Final = {"fields": ["speaker"]}
PLAIN_RRF: Final = RetrievalConfig.model_validate(
    {"candidates": 200, "fusion": {"method": "rrf", "weights": {"keyword": 0.5, "vector": 0.5}},
     "mention": {**_MENTION, "weight": 0.0}}
)  # fmt: skip
"""Plain reciprocal-rank fusion (Cormack et al. 2009, k = 60) of the keyword and vector
lists, equal weights, no mention boost, no context: nothing in it is chosen on data. The
vector leg embeds the query without the speaker names it mentions (no parameter)."""


def _setting(method: str, keyword: float, mention: float, context: Any) -> RetrievalConfig:
    settings: dict[str, Any] = {
        "candidates": 200,
        "fusion": {"method": method, "weights": {"keyword": keyword, "vector": 1 - keyword}},
        "mention": {**_MENTION, "weight": mention},
    }
    if context is not None:
        window, neighbour, group = context
        settings["context"] = {
            "groupField": "session", "orderField": "turn", "window": window,
            "neighbourWeight": neighbour, "groupWeight": group, "groupTop": 3, "expand": 20,
        }  # fmt: skip
    return RetrievalConfig.model_validate(settings)


def setting_name(config: RetrievalConfig) -> str:
    """A short readable name: ``rrf kw0.5 m0.0 w2/n0.7/g0.3`` (context last, ``-`` off)."""
    fusion, context = config.fusion, config.context
    ctx = "-"
    if context.group_field is not None:
        ctx = f"w{context.window}/n{context.neighbour_weight}/g{context.group_weight}"
    keyword = fusion.weights.get("keyword", 0.0)
    return f"{fusion.method} kw{keyword:g} m{config.mention.weight:g} {ctx}"


def candidate_grid() -> dict[str, RetrievalConfig]:
    """The settings a fold chooses among, by :func:`setting_name`, :data:`PLAIN_RRF`
    first: fusion rrf / weighted, keyword weight 0.5 / 0.7 / 0.8, speaker mention boost
    0 / 0.1, and context off or window 1 / 2 × neighbour weight 0.3 / 0.7 × group weight
    0 / 0.3 (108 settings; general values, none taken from a result)."""
    contexts: list[Any] = [None, *itertools.product((1, 2), (0.3, 0.7), (0.0, 0.3))]
    grid = {setting_name(PLAIN_RRF): PLAIN_RRF}
    for method, keyword, mention, context in itertools.product(
        ("rrf", "weighted"), (0.5, 0.7, 0.8), (0.0, 0.1), contexts
    ):
        config = _setting(method, keyword, mention, context)
        grid.setdefault(setting_name(config), config)
    return grid


_CONTEXT: Final = (2, 0.3, 0.3)


def rule_grid() -> dict[str, RetrievalConfig]:
    """The few settings issue 38's rule compares (four, :data:`PLAIN_RRF` first): plain
    RRF; issue 28's default (weighted keyword 0.8 / vector 0.2, mention boost 0.1, context
    window 2, neighbour 0.3, group 0.3: chosen on two files); and distribution-based score
    fusion (``dbsf``, calibrated per query: no weight to choose) with equal weights, with
    and without that mention boost and context. ``--grid full`` is :func:`candidate_grid`."""
    settings = [
        PLAIN_RRF,
        _setting("weighted", 0.8, 0.1, _CONTEXT),
        _setting("dbsf", 0.5, 0.1, _CONTEXT),
        _setting("dbsf", 0.5, 0.0, None),
    ]
    return {setting_name(config): config for config in settings}


def _recall_at_10(provider: RetrievalSearchProvider, questions: Sequence[Any],
                  dia_by_id: Mapping[str, str]) -> float:  # fmt: skip
    recalls = []
    for question in questions:
        hits = provider.search(
            MemorySearchInput(query=question.question, strategy="hybrid", limit=10)
        )
        found = [dia_by_id.get(hit.memory.id, "") for hit in hits]
        recalls.append(evidence_recall(found, question.evidence, 10))
    return statistics.fmean(recalls) if recalls else 0.0


def score_grid(
    path: str | Path, embedder: EmbeddingProvider, grid: Mapping[str, RetrievalConfig],
    index_fields: Sequence[str] = ("speaker",),
) -> dict[str, float]:  # fmt: skip
    """Hybrid evidence recall@10 of every setting of ``grid`` on one conversation.

    The conversation is written once into a fresh SQLite store (as
    :func:`ditto_worker.cli.eval.evaluate_conversation` does); every setting then
    searches every question with evidence through the pipeline over a :class:`MemoSource`.

    Returns:
        {setting name: recall@10 in [0, 1]}, in ``grid``'s order.

    Raises:
        EvalError: a write failed.
    """
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker.cli.eval import ingest

    conv = load_conversation(path)
    questions = [q for q in conv.questions if q.evidence]
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteMemoryStore(
            Path(folder) / "tune.sqlite", embedder=embedder, index_fields=index_fields
        )
        try:
            dia_by_id = ingest(create_memory(store), conv)
            source = MemoSource(store)
            return {
                name: _recall_at_10(
                    RetrievalSearchProvider(source, embedder, config), questions, dia_by_id
                )  # fmt: skip
                for name, config in grid.items()
            }
        finally:
            store.close()


@dataclass(frozen=True)
class Fold:
    """One held-out file: recalls@10 on it, in [0, 1]."""

    held_out: str
    chosen: str
    """The setting with the best mean recall@10 on the other files (ties: grid order)."""
    chosen_recall: float
    rrf_recall: float
    shipped: str
    shipped_recall: float
    in_sample: str
    """The best setting on the held-out file itself (a tuned, optimistic figure)."""
    in_sample_recall: float


def best_setting(scores: Mapping[str, Mapping[str, float]], files: Sequence[str]) -> str:
    """The setting with the best mean recall@10 over ``files`` (ties: the first scored)."""
    names = list(next(iter(scores.values())))
    return max(names, key=lambda n: (statistics.fmean(scores[f][n] for f in files),
                                     -names.index(n)))  # fmt: skip


def leave_one_out(
    scores: Mapping[str, Mapping[str, float]], shipped: str, baseline: str | None = None
) -> list[Fold]:
    """One :class:`Fold` per file of ``scores`` ({file: {setting: recall@10}}, at least
    two files, every file scored on the same settings, ``shipped`` and ``baseline``
    among them; ``baseline`` defaults to :data:`PLAIN_RRF`'s name).

    Raises:
        ValueError: fewer than two files, or a setting missing.
    """
    baseline = baseline or setting_name(PLAIN_RRF)
    if len(scores) < 2:
        raise ValueError("leave-one-out needs at least two conversation files")
    folds = []
    for held_out, own in scores.items():
        if shipped not in own or baseline not in own:
            raise ValueError(f"{held_out}: the shipped setting or the baseline was not scored")
        chosen = best_setting(scores, [f for f in scores if f != held_out])
        in_sample = best_setting(scores, [held_out])
        folds.append(Fold(held_out, chosen, own[chosen], own[baseline], shipped, own[shipped],
                          in_sample, own[in_sample]))  # fmt: skip
    return folds


def required_wins(folds: int) -> int:
    """Folds a tuned setting must win for it to ship: five of six, scaled (``ceil(5n/6)``:
    every fold for two to five files, 5 of 6, 10 of 12)."""
    return math.ceil(5 * folds / 6)


def ship_decision(folds: Sequence[Fold]) -> bool:
    """True when the setting chosen without the held-out file beats plain RRF on it
    (strictly) in at least :func:`required_wins` folds, i.e. tuning may change the default."""
    wins = sum(f.chosen_recall > f.rrf_recall for f in folds)
    return bool(folds) and wins >= required_wins(len(folds))


COLUMNS: Final = ("chosen_recall", "rrf_recall", "shipped_recall", "in_sample_recall")
"""The :class:`Fold` recalls summarised by :func:`fold_summary`, in table order."""


def fold_summary(folds: Sequence[Fold]) -> dict[str, tuple[float, float]]:
    """{column of :data:`COLUMNS`: (mean over the folds, worst fold)}, recalls@10 in [0, 1].

    Raises:
        ValueError: no folds.
    """
    if not folds:
        raise ValueError("no folds to summarise")
    return {
        column: (statistics.fmean(getattr(f, column) for f in folds),
                 min(getattr(f, column) for f in folds))
        for column in COLUMNS
    }  # fmt: skip


def format_leave_one_out(folds: Sequence[Fold], pooled_best: str) -> str:
    """The leave-one-out table (one row per held-out file, then the mean and the worst
    fold of each column) and the decision."""
    lines = ["held out      chosen on the others (R@10)      plain RRF  shipped    "
             "in-sample best (R@10)"]  # fmt: skip
    for f in folds:
        lines.append(
            f"{f.held_out:<13} {f.chosen:<26} {f.chosen_recall:.3f}   {f.rrf_recall:.3f}      "
            f"{f.shipped_recall:.3f}      {f.in_sample} {f.in_sample_recall:.3f}"
        )
    if folds:
        for label, index in (("mean", 0), ("worst fold", 1)):
            chosen, rrf, shipped, best = (pair[index] for pair in fold_summary(folds).values())
            lines.append(f"{label:<13} {'':<26} {chosen:.3f}   {rrf:.3f}      "
                         f"{shipped:.3f}      {best:.3f}")  # fmt: skip
    wins = sum(f.chosen_recall > f.rrf_recall for f in folds)
    need = required_wins(len(folds))
    rule = f"beats plain RRF in {wins} of {len(folds)} folds (needed: {need})"
    if ship_decision(folds):
        verdict = f"the chosen setting {rule}: ship {pooled_best!r}"
    else:
        verdict = f"the chosen setting {rule}: ship plain RRF"
    lines.append(f"shipped default: {folds[0].shipped if folds else 'unknown'}; {verdict}")
    return "\n".join(lines)
