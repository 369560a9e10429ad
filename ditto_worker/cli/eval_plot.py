"""``ditto-worker eval locomo --plot FILE.png``: the evaluation as one figure (issue 28 item 8).

Three panels from the :class:`~ditto_worker.cli.eval.EvalReport` rows of a run:

1. evidence recall@k for k = 1 … 10, one line per conversation and strategy;
2. recall@10 per question category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
   5 adversarial), one bar per strategy, pooled over the conversations (weighted by their
   questions); the bar's label is the number of questions;
3. the search latency distribution per strategy (box: quartiles, whiskers 5th-95th
   percentile, ms, log scale), every call of every conversation;
4. with ``--leave-one-out`` (issue 38 item 4), hybrid recall@10 per held-out file: the
   setting chosen on the other files, plain RRF, the shipped default and the in-sample best,
   one bar each, with the mean over the folds last (:class:`~ditto_worker.cli.tuning.Fold`).

matplotlib (``pip install "ditto-worker[bench]"``) is imported only when a figure is drawn,
with the non-interactive Agg backend; importing this module imports nothing heavy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ditto_worker.cli.eval import EvalReport
from ditto_worker.errors import ConfigError

if TYPE_CHECKING:
    from ditto_worker.cli.tuning import Fold

__all__ = ["CATEGORIES", "category_recalls", "plot_reports"]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo question categories (Maharana et al., ACL 2024)."""


def category_recalls(reports: Sequence[EvalReport]) -> dict[str, dict[int, tuple[int, float]]]:
    """{strategy: {category: (questions, recall@10 pooled over the reports)}}.

    The pooled recall is the question-weighted mean of each report's category recall@10.
    """
    sums: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    for report in reports:
        for name, item in report.strategies.items():
            for category, (count, _, r10) in item.per_category.items():
                cell = sums[name][category]
                cell[0] += count
                cell[1] += count * r10
    return {
        name: {c: (int(n), total / n) for c, (n, total) in sorted(cats.items()) if n}
        for name, cats in sums.items()
    }


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError('--plot needs matplotlib: pip install "ditto-worker[bench]"') from exc
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


_STYLES = ("-", "--", ":", "-.")


def _recall_panel(axis: Any, reports: Sequence[EvalReport]) -> None:
    colours: dict[str, str] = {}  # one colour per strategy, one line style per conversation
    for index, report in enumerate(reports):
        for name, item in report.strategies.items():
            if item.recall_at_k:
                colour = colours.setdefault(name, f"C{len(colours)}")
                ks = range(1, len(item.recall_at_k) + 1)
                style = _STYLES[index % len(_STYLES)]
                label = f"{report.conversation} {name}"
                axis.plot(ks, item.recall_at_k, style, color=colour, marker="o", label=label)
    axis.set(xlabel="k", ylabel="evidence recall@k", title="Recall@k", ylim=(0, 1))
    axis.legend(fontsize="small")
    axis.grid(alpha=0.3)


def _category_panel(axis: Any, reports: Sequence[EvalReport]) -> None:
    pooled = category_recalls(reports)
    width = 0.8 / max(1, len(pooled))
    for index, (name, cats) in enumerate(pooled.items()):
        xs = [c + (index - (len(pooled) - 1) / 2) * width for c in cats]
        bars = axis.bar(xs, [r for _, r in cats.values()], width, label=name)
        axis.bar_label(bars, labels=[str(n) for n, _ in cats.values()], fontsize="x-small")
    axis.set_xticks(list(CATEGORIES), [f"{c} {n}" for c, n in CATEGORIES.items()], fontsize="small")
    axis.set(ylabel="recall@10", title="Recall@10 per category (bar label: questions)")
    axis.set_ylim(0, 1.05)
    axis.legend(fontsize="small")


def _latency_panel(axis: Any, reports: Sequence[EvalReport]) -> None:
    latencies: dict[str, list[float]] = defaultdict(list)
    for report in reports:
        for name, item in report.strategies.items():
            latencies[name].extend(item.latencies_ms)
    names = [name for name, values in latencies.items() if values]
    axis.boxplot([latencies[n] for n in names], whis=(5, 95), showfliers=False)
    axis.set_xticks(range(1, len(names) + 1), names)
    axis.set_yscale("log")
    axis.set(ylabel="ms per search (log)", title="Search latency (box: quartiles, 5-95 %)")
    axis.grid(alpha=0.3, axis="y")


_FOLD_BARS = (
    ("chosen_recall", "chosen on the others"),
    ("rrf_recall", "plain RRF"),
    ("shipped_recall", "shipped default"),
    ("in_sample_recall", "in-sample best"),
)


def _folds_panel(axis: Any, folds: Sequence[Fold]) -> None:
    names = [f.held_out for f in folds] + ["mean"]
    width = 0.8 / len(_FOLD_BARS)
    for index, (column, label) in enumerate(_FOLD_BARS):
        values = [getattr(f, column) for f in folds]
        values.append(sum(values) / len(values))
        xs = [x + (index - (len(_FOLD_BARS) - 1) / 2) * width for x in range(len(names))]
        axis.bar(xs, values, width, label=label)
    axis.set_xticks(range(len(names)), names, fontsize="small")
    axis.set(ylabel="hybrid recall@10", title="Leave-one-out: each file held out")
    axis.set_ylim(0, 1.05)
    axis.legend(fontsize="small", loc="lower right")
    axis.grid(alpha=0.3, axis="y")


def plot_reports(
    reports: Sequence[EvalReport], path: str | Path, folds: Sequence[Fold] = ()
) -> Path:
    """Draw the panels (module docstring; the fourth only with ``folds``) into a PNG at
    ``path``.

    Raises:
        ConfigError: matplotlib is not installed, or ``reports`` is empty.
    """
    if not reports:
        raise ConfigError("--plot: nothing was measured")
    pyplot = _matplotlib()
    rows = 2 if folds else 1
    figure, grid = pyplot.subplots(rows, 3, figsize=(18, 5.5 * rows), layout="constrained",
                                   squeeze=False)  # fmt: skip
    axes = list(grid.flat)
    _recall_panel(axes[0], reports)
    _category_panel(axes[1], reports)
    _latency_panel(axes[2], reports)
    if folds:
        _folds_panel(axes[3], folds)
        for spare in axes[4:]:
            spare.remove()
    figure.suptitle("ditto-worker eval locomo")
    out = Path(path)
    figure.savefig(out, dpi=110)
    pyplot.close(figure)
    return out
