"""``ditto-worker export`` and ``ditto-worker import``: memories as JSON Lines, from one
store to another (:mod:`ditto_worker.cli.transfer` does the work).

Registered on the command line's app by :mod:`ditto_worker.cli.commands`. The store is
built as ``ditto-worker worker --store NAME`` builds it: ``plugins.<name>`` of
``ditto.yaml`` (or ``--config``) and the ``DITTO_WORKER_MEMORY_<NAME>_*`` environment.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from ditto_worker.cli.options import ConfigOpt, ScopeOpt, check_store, fail, load_config
from ditto_worker.errors import ConfigError, DittoError
from ditto_worker.scope import Scope

__all__ = ["export", "import_"]

_StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store plugin (sqlite, postgres, qdrant, mysql, milvus ...), configured by "
        "plugins.<store> in ditto.yaml and DITTO_WORKER_MEMORY_<STORE>_* as a worker's; "
        "default workers.memory.store.",
    ),
]
_ScopesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--scope",
        metavar="tenant=ID,user=ID",
        help="A scope to export (tenant and user, optionally space=task:ID), as invoke "
        "takes it; repeat for several. Default: the unscoped memories.",
    ),
]


@contextmanager
def _memory(command: str, config: Path | None, store: str | None) -> Iterator[tuple[Any, Any]]:
    """The SDK over the configured store and the store itself; closed at the end."""
    from ditto_worker.memory import create_memory
    from ditto_worker.runtime.registry import build_store

    cfg = load_config(config, None)
    check_store(command, store)
    try:
        plugin = build_store(cfg, store)
    except ConfigError as exc:
        fail(command, str(exc))
    try:
        yield create_memory(plugin), plugin
    finally:
        close = getattr(plugin, "close", None)
        if callable(close):
            close()


def _scopes(values: list[str] | None, unscoped: bool) -> list[Scope | None]:
    from ditto_worker.cli.options import parse_scope_option

    try:
        scopes: list[Scope | None] = [parse_scope_option(value) for value in values or ()]
    except ConfigError as exc:
        fail("export", str(exc))
    return [None, *scopes] if unscoped or not scopes else scopes


def export(
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", dir_okay=False, help="File to write; default stdout."),
    ] = None,
    scope: _ScopesOpt = None,
    all_scopes: Annotated[
        bool,
        typer.Option(
            "--all-scopes",
            help="Every scope of the store (sqlite, postgres, mysql, qdrant list theirs); "
            "not with --scope.",
        ),
    ] = False,
    unscoped: Annotated[
        bool,
        typer.Option(
            "--unscoped", help="Also the unscoped memories (the default without --scope)."
        ),
    ] = False,
    page_size: Annotated[
        int, typer.Option(min=1, max=10000, help="Memories per QUERY page.")
    ] = 1000,
    config: ConfigOpt = None,
    store: _StoreOpt = None,
) -> None:
    """Write a store's memories as JSON Lines: keys, content, metadata, operation ids.

    The first line is a header naming the format and the store; every other line is one
    memory with its scope, in creation order. Name each scope with --scope (and
    --unscoped for the memories stored without a scope), or give --all-scopes. Memories
    are read page by page with QUERY and its cursor, never all at once. Ids, timestamps
    and vectors are not carried (the target assigns ids and embeds again). A summary
    (counts only) goes to stderr. Exit 0 when done, 1 when the store refused a read, 2
    for a config or option error.
    """
    from ditto_worker.cli.transfer import export_memories, list_scopes

    scopes = _scopes(scope, unscoped)
    name = store or load_config(config, None).memory_worker.store
    if all_scopes and (scope or unscoped):
        fail("export", "--all-scopes exports every scope: give no --scope or --unscoped")
    with _memory("export", config, store) as (memory, plugin):
        try:
            scopes = list_scopes(plugin) if all_scopes else scopes
            if output is None:
                summary = export_memories(memory, scopes, sys.stdout, name, page_size)
            else:
                with output.open("w", encoding="utf-8", newline="\n") as out:
                    summary = export_memories(memory, scopes, out, name, page_size)
        except DittoError as exc:
            fail("export", str(exc), 1)
    counts = ", ".join(f"{label}: {n:,}" for label, n in summary.counts.items())
    typer.echo(
        f"export: {sum(summary.counts.values()):,} memories from {name} ({counts})", err=True
    )


def import_(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, metavar="FILE", help="A file written by export."
        ),
    ],
    scope: ScopeOpt = None,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1, max=10000, help="Memories per WRITE (a re-run replays with the same size)."
        ),
    ] = 500,
    config: ConfigOpt = None,
    store: _StoreOpt = None,
) -> None:
    """Write the memories of an export file into a store, through MEMORY.WRITE.

    Every line is checked first: a bad line stops the import before anything is written,
    naming its line number and field. Memories go into the scope on their line, or all
    into --scope. The target embeds them with its own embedding model. Operation ids are
    kept, and every WRITE carries one, so running the same import again writes nothing
    twice (on a store that keeps operation ids: sqlite, postgres, qdrant; on one that does
    not, memories whose key is already there are skipped and the summary counts the
    keyless ones a re-run would write again). A summary (counts only) goes to stderr.
    Exit 0 when done, 1 for a bad line or a refused write, 2 for a config or option error.
    """
    from ditto_worker.cli.options import scope_or_exit
    from ditto_worker.cli.transfer_import import import_memories

    override = scope_or_exit("import", scope)
    with _memory("import", config, store) as (memory, plugin):
        caps = getattr(plugin, "capabilities", None)
        keeps = bool(getattr(caps, "operation_ids", False))
        try:
            summary = import_memories(memory, file, keeps, override, batch_size)
        except DittoError as exc:
            fail("import", str(exc), 1)
    notes = []
    if summary.skipped:
        notes.append(f"{summary.skipped:,} already there (same key and content)")
    if summary.expired:
        notes.append(
            f"{summary.expired:,} imported by a run older than the store's operationRetentionS "
            "(not written again)"
        )
    if summary.dropped_operation_ids:
        notes.append(
            f"{summary.dropped_operation_ids:,} operation ids not kept (the store keeps none)"
        )
    if summary.not_idempotent:
        notes.append(
            f"{summary.not_idempotent:,} keyless memories a re-run would write again "
            "(the store keeps no operation ids)"
        )
    extra = f"; {'; '.join(notes)}" if notes else ""
    typer.echo(
        f"import: {summary.records:,} memories read, {summary.writes:,} WRITE calls "
        f"(replays of an earlier run write nothing){extra}",
        err=True,
    )
