"""``ditto-worker prune``: delete a store's expired ledger rows now (issue 37 item 4).

Registered on the command line's app by :mod:`ditto_worker.cli.commands`. The store is
built as ``ditto-worker worker --store NAME`` builds it (``plugins.<name>`` of
``ditto.yaml`` and ``DITTO_WORKER_MEMORY_<NAME>_*``): its ``operationRetentionS`` and
``executionRetentionS`` decide what is old. Stores also prune in the background (a
bounded batch at most once a minute, inside a mutation); this command catches up after
a long pause or a retention made shorter, in short transactions beside running writers
(:mod:`ditto_worker.memory.retention`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ditto_worker.cli.options import ConfigOpt, StoreOpt, check_store, fail, load_config
from ditto_worker.errors import ConfigError, DittoError
from ditto_worker.memory.retention import PRUNE_BATCH, PrunableStore

__all__ = ["prune"]


def prune(
    batch: Annotated[
        int,
        typer.Option(
            "--batch", min=1, help="Rows deleted per transaction (a writer waits on one)."
        ),
    ] = PRUNE_BATCH,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Delete the operation ids older than twice operationRetentionS and the execution
    ids older than executionRetentionS from the store's ledgers.

    A replay of an operation id older than operationRetentionS (30 days by default)
    fails OPERATION_EXPIRED; once pruned, the id is new again. Writers keep running:
    each transaction deletes at most --batch rows. Supported on sqlite, postgres, mysql,
    qdrant and milvus.

    Exit 0 when done, 1 when the store fails (safe message on stderr), 2 for a config
    error or a store without ledgers.
    """
    from ditto_worker.runtime.registry import build_store

    cfg = load_config(config, None)
    check_store("prune", store)
    name = store or cfg.memory_worker.store
    try:
        plugin = build_store(cfg, name)
    except ConfigError as exc:
        fail("prune", str(exc))
    except DittoError as exc:
        fail("prune", f"failed: {exc}", 1)
    try:
        target = plugin if isinstance(plugin, PrunableStore) else None
        if target is None:
            fail("prune", f"the {name} store keeps no ledgers to prune")
        report = target.prune_ledgers(batch)
    except DittoError as exc:
        fail("prune", f"failed: {exc}", 1)
    finally:
        if callable(getattr(plugin, "close", None)):
            plugin.close()
    typer.echo(
        f"prune: store {name}, {report.operations} operation ids and {report.executions} "
        f"execution ids deleted in {report.batches} transactions (longest "
        f"{report.longest_batch_s * 1000:.1f} ms)"
    )
