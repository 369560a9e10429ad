"""``ditto-worker eval locomo --plot FILE.png``: the evaluation as one figure (issue 28 item 8).

Three panels from the :class:`~ditto_worker.cli.eval.EvalReport` rows of a run:

1. evidence recall@k for k = 1 … 10, one line per conversation and strategy;
2. recall@10 per question category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
   5 adversarial), one bar per strategy, pooled over the conversations (weighted by their
   questions); the bar's label is the number of questions;
3. the search latency distribution per strategy (box: quartiles, whiskers 5th-95th
   percentile, ms, log scale), every call of every conversation.

matplotlib (``pip install "ditto-worker[bench]"``) is imported only when a figure is drawn,
with the non-interactive Agg backend; importing this module imports nothing heavy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ditto_worker.cli.eval import EvalReport
from ditto_worker.errors import ConfigError

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


def plot_reports(reports: Sequence[EvalReport], path: str | Path) -> Path:
    """Draw the three panels (module docstring) into a PNG at ``path``.

    Raises:
        ConfigError: matplotlib is not installed, or ``reports`` is empty.
    """
    if not reports:
        raise ConfigError("--plot: nothing was measured")
    pyplot = _matplotlib()
    figure, axes = pyplot.subplots(1, 3, figsize=(18, 5.5), layout="constrained")
    _recall_panel(axes[0], reports)
    _category_panel(axes[1], reports)
    _latency_panel(axes[2], reports)
    figure.suptitle("ditto-worker eval locomo")
    out = Path(path)
    figure.savefig(out, dpi=110)
    pyplot.close(figure)
    return out
