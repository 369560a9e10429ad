"""``ditto-worker reindex``: re-embed a store's memories under a new embedding identity.

Registered on the command line's app by :mod:`ditto_worker.cli.commands`. The store is
built as ``ditto-worker worker --store NAME`` builds it (``plugins.<name>`` of
``ditto.yaml`` and ``DITTO_WORKER_MEMORY_<NAME>_*``); ``--embedding`` overrides its
``embedding`` setting. A store that can switch identities is a
:class:`ditto_worker.memory.ports.ReembeddingStore` (SQLite:
:mod:`ditto_plugin_sqlite.reembed`, PostgreSQL: :mod:`ditto_plugin_postgres.reembed`, Qdrant:
:mod:`ditto_plugin_qdrant.reembed`, MySQL: :mod:`ditto_plugin_mysql.reembed`,
Milvus: :mod:`ditto_plugin_milvus.reembed`); the
others are refused with exit 2.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ditto_worker.cli.options import ConfigOpt, StoreOpt, check_store, fail, load_config
from ditto_worker.errors import ConfigError, DittoError
from ditto_worker.memory.ports import ReembeddingStore

__all__ = ["reindex"]


def reindex(
    embedding: Annotated[
        str | None,
        typer.Option(
            "--embedding",
            help="Embedding provider to re-embed with (local, http ...); overrides "
            "plugins.<store>.embedding. Default: the configured one.",
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Records per model batch.")
    ] = 256,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Re-embed every memory of the store with its embedding provider and switch the
    store to that provider's model.

    Run it after changing the embedding model. Until it finishes, the store keeps its old
    vectors and model: workers on the old model keep searching, workers on the new one
    fail their vector searches. An interrupted run finishes when run again. Supported
    on sqlite, postgres, qdrant, mysql and milvus.

    Exit 0 when done, 1 when the store or model fails (safe message on stderr), 2 for a
    config error or a store that cannot reindex.
    """
    from ditto_worker.runtime.registry import build_store

    cfg = load_config(config, None)
    check_store("reindex", store)
    name = store or cfg.memory_worker.store
    env = dict(os.environ)
    if embedding is not None:
        env[f"DITTO_WORKER_MEMORY_{name.upper()}_EMBEDDING"] = embedding
    try:
        plugin = build_store(cfg, name, env)
    except ConfigError as exc:
        fail("reindex", str(exc))
    except DittoError as exc:
        fail("reindex", f"failed: {exc}", 1)
    try:
        target = plugin if isinstance(plugin, ReembeddingStore) else None
        if target is None:
            fail("reindex", f"re-embedding under a new model is not supported yet for {name}")
        done = target.reembed_embeddings(batch_size)
        embedder = target.embedder
        identity = "none" if embedder is None else embedder.identity.describe()
    except DittoError as exc:
        fail("reindex", f"failed: {exc}", 1)
    finally:
        if callable(getattr(plugin, "close", None)):
            plugin.close()
    typer.echo(f"reindex: store {name}, {done} memories embedded, model {identity}")
