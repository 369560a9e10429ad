"""Plugins and worker kinds by name, through entry points (MEM-PY-1, MEM-RT-1).

* Store plugins: group ``ditto_worker.stores``; an entry point names a factory
  ``create_store(settings: dict, env: Mapping[str, str]) -> MemoryStore``. Used only when
  a worker process builds its store from ``ditto.yaml``; the SDK factories take plugin
  objects and never come here.
* Worker kinds: group ``ditto_worker.workers``; an entry point names a factory
  ``from_config(config: RuntimeConfig) -> WorkerDefinition``, and ``workers.<name>.factory:
  "module:function"`` in ``ditto.yaml`` adds one more. A factory must be cheap: it opens
  nothing (its definition's ``open`` and handlers build resources per process), so a
  client may call it only to learn node ids and output types. MEMORY, RETRIEVAL and
  CONTEXT are entry points of this package like any other kind: the fleet's code names
  none of them.
* Embedding providers: group ``ditto_worker.embedders``; an entry point names a factory
  ``(settings: dict, env: Mapping[str, str]) -> EmbeddingProvider``. A store plugin's
  ``embedding: <name>`` setting is built through :func:`build_embedder`, so plugins reach
  ``local`` and ``http`` (entry points of this package) like a third party's provider,
  never through :mod:`ditto_worker.retrieval`.
* Transports: group ``ditto_worker.transports``; an entry point names a factory
  ``(config: RuntimeConfig, nodes: NodeTable, scope: Scope | None) -> client`` with
  ``invoke`` / ``ainvoke`` / ``close``. ``create_ditto`` with a broker configured connects
  through the one ``fleet.transport`` names (:func:`connect_transport`; ``celery``: the
  fleet's ``DittoClient``), so the runtime names no transport.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ditto_worker.errors import ConfigError
from ditto_worker.runtime.definition import NodeSpec, WorkerDefinition

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig
    from ditto_worker.scope import Scope

__all__ = [
    "DEVICE_ENV",
    "TORCH_THREADS_ENV",
    "EMBEDDER_GROUP",
    "ENTRY_POINT_GROUP",
    "TRANSPORT_GROUP",
    "WORKER_GROUP",
    "NodeTable",
    "StoreMissingError",
    "available_stores",
    "build_embedder",
    "build_store",
    "connect_transport",
    "node_table",
    "store_single_writer",
    "worker_definitions",
]

logger = logging.getLogger(__name__)

DEVICE_ENV = "DITTO_WORKER_RETRIEVAL_DEVICE"
"""The environment variable a local embedding provider reads its torch device from when
its own settings name none (``workers.retrieval.device``; :func:`build_store` sets it)."""
TORCH_THREADS_ENV = "DITTO_WORKER_RETRIEVAL_TORCH_THREADS"
"""The environment variable a local embedding provider reads its torch CPU threads from
(``workers.retrieval.torchThreads``; :func:`build_store` sets it; 0 = half the cores)."""

ENTRY_POINT_GROUP = "ditto_worker.stores"
WORKER_GROUP = "ditto_worker.workers"
"""Entry point group of worker kinds: ``name = "module:from_config"``."""
EMBEDDER_GROUP = "ditto_worker.embedders"
"""Entry point group of embedding providers: ``name = "module:factory"``."""
TRANSPORT_GROUP = "ditto_worker.transports"
"""Entry point group of client transports: ``name = "module:factory"``."""

WorkerFactory = Callable[["RuntimeConfig"], WorkerDefinition]
NodeTable = Mapping[str, tuple[WorkerDefinition, NodeSpec]]
"""Node id -> (its worker definition, its spec)."""

StoreFactory = Callable[[dict[str, Any], Mapping[str, str]], Any]


def entry_points(*, group: str) -> Any:
    """``importlib.metadata.entry_points(group=...)``, imported on first use: it reads the
    installed distributions' metadata (~10 ms), which ``import ditto_worker`` need not."""
    from importlib.metadata import entry_points as found

    return found(group=group)


def available_stores() -> list[str]:
    """Names of the installed store plugins, sorted."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


class StoreMissingError(ConfigError):
    """A store that must already exist does not (``build_store(must_exist=True)``): a worker
    that only reads it (a retrieval target) never creates an empty one."""


def _accepts_must_exist(factory: Any) -> bool:
    try:
        return "must_exist" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def build_store(
    config: RuntimeConfig,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    must_exist: bool = False,
) -> Any:
    """Build the store plugin ``name`` (default ``workers.memory.store``) for this process.

    Args:
        config: the runtime config; ``plugins.<name>`` is passed to the factory.
        name: plugin name; overrides ``workers.memory.store``.
        env: environment for the plugin's ``DITTO_WORKER_MEMORY_<PLUGIN>_*`` settings.
        must_exist: the store must already exist (a reader's, e.g. a retrieval target):
            passed to a factory that takes ``must_exist`` (SQLite: the file); a factory
            that does not builds the store as usual.

    Raises:
        ConfigError: no installed plugin has that name.
        StoreMissingError: ``must_exist`` and the plugin says the store is not there.
    """
    name = name or config.memory_worker.store
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        raise ConfigError(
            f"no store plugin named {name!r}; installed: {', '.join(available_stores()) or 'none'}"
        )
    factory: StoreFactory = matches[0].load()
    settings, environ = config.plugin_settings(name), os.environ if env is None else env
    # the process's device reaches the embedder a plugin builds (build_embedder(kind, None,
    # env)): workers.retrieval.device, which already holds DITTO_WORKER_RETRIEVAL_DEVICE
    retrieval = config.retrieval_worker
    environ = {**environ, DEVICE_ENV: retrieval.device,
               TORCH_THREADS_ENV: str(retrieval.torch_threads)}  # fmt: skip
    if must_exist and _accepts_must_exist(factory):
        return factory(settings, environ, must_exist=True)  # type: ignore[call-arg]
    return factory(settings, environ)


def store_single_writer(config: RuntimeConfig, name: str | None = None) -> bool:
    """Whether the store plugin ``name`` (default ``workers.memory.store``) has one writer at
    a time per database: its factory's return annotation names a store class whose
    ``single_writer`` class attribute is true (SQLite: ``BEGIN IMMEDIATE`` takes the
    database's one write lock). Nothing is built. ``False`` when unknown (no such plugin,
    an unannotated factory).

    Source: issue 28 item 4 — ``ditto-worker worker`` runs a group of MEMORY mutations on
    such a store on one thread by default (:func:`ditto_worker.cli.worker_command.resolve_nodes`).
    """
    import typing

    try:
        factory = _named(ENTRY_POINT_GROUP, name or config.memory_worker.store, "store plugin")
        store_class = typing.get_type_hints(factory).get("return")
    except (ConfigError, ImportError, NameError, TypeError) as exc:
        # a plugin that cannot be found or imported fails later, where it is built
        logger.debug("store plugin traits unknown (%s)", type(exc).__name__)
        return False
    return bool(getattr(store_class, "single_writer", False))


def _named(group: str, name: str, what: str, other: str = "") -> Any:
    """The object the entry point ``name`` of ``group`` names, loaded.

    Raises:
        ConfigError: no installed entry point has that name (the message lists those
            that are installed; an editable install lists new ones after a reinstall).
    """
    found = entry_points(group=group)
    matches = [ep for ep in found if ep.name == name]
    if not matches:
        installed = ", ".join(sorted(ep.name for ep in found)) or "none"
        raise ConfigError(f"unknown {what} {name[:40]!r}; installed ({group}): {installed}{other}")
    return matches[0].load()


def build_embedder(
    kind: str | None,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """The embedding provider a config key names (``plugins.<store>.embedding`` …).

    Args:
        kind: an entry point name of :data:`EMBEDDER_GROUP` (this package installs
            ``local``: all-MiniLM-L6-v2 through sentence-transformers, and ``http``: an
            OpenAI-compatible endpoint from ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``);
            ``"none"`` / ``""`` / ``None``: no provider.
        settings: the provider's own settings (``local``: ``modelPath``, ``device``,
            ``batchSize``; ``http``: none — the environment configures it).
        env: the environment (default ``os.environ``).

    Returns:
        The provider (an ``EmbeddingProvider`` of :mod:`ditto_worker.memory.ports`, which
        sits above this module: hence ``Any`` here), or ``None``. Building ``local`` loads
        the model (about 0.5 s warm).

    Raises:
        ConfigError: an unknown kind or setting, or a missing ``http`` variable.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when a model cannot be loaded.
    """
    if kind in (None, "", "none"):
        return None
    factory = _named(EMBEDDER_GROUP, str(kind), "embedding provider", "; or none")
    return factory(dict(settings or {}), os.environ if env is None else env)


def connect_transport(config: RuntimeConfig, nodes: NodeTable, scope: Scope | None = None) -> Any:
    """A client of the fleet through the transport ``config.fleet.transport`` names.

    Args:
        config: the runtime config (``fleet:`` says where the queues live).
        nodes: node id -> (definition, spec) of the definitions the caller was given
            (the client refuses other ids with ``UNKNOWN_NODE`` before sending).
        scope: the trusted scope of calls that name none.

    Returns:
        The transport's client: ``invoke`` / ``ainvoke`` / ``close`` as
        :class:`~ditto_worker.runtime.runtime.Runtime` calls them.

    Raises:
        ConfigError: no installed transport has that name.
    """
    factory = _named(TRANSPORT_GROUP, config.fleet.transport, "transport")
    return factory(config, nodes, scope)


def _load_reference(reference: str, where: str) -> WorkerFactory:
    module, _, attribute = reference.partition(":")
    if not module or not attribute:
        raise ConfigError(f"{where}: {reference!r} is not 'module:function'")
    try:
        target: Any = importlib.import_module(module)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot load {reference!r} ({type(exc).__name__})") from exc
    if not callable(target):
        raise ConfigError(f"{where}: {reference!r} is not callable")
    factory: WorkerFactory = target
    return factory


def _factories(config: RuntimeConfig) -> dict[str, Callable[[], WorkerFactory]]:
    found: dict[str, Callable[[], WorkerFactory]] = {
        ep.name: ep.load for ep in entry_points(group=WORKER_GROUP)
    }
    for name, section in sorted(config.worker_sections.items()):
        reference = section.get("factory")
        if isinstance(reference, str):
            where = f"workers.{name}.factory"
            found[name] = lambda r=reference, w=where: _load_reference(r, w)  # type: ignore[misc]
    return found


def worker_definitions(
    config: RuntimeConfig, names: Iterable[str] | None = None
) -> list[WorkerDefinition]:
    """The worker definitions of this installation and config, one per kind.

    Args:
        config: the runtime config handed to every factory.
        names: only these entry point / section names (lower case); ``None``: all.

    Returns:
        Definitions sorted by kind; node ids are distinct across kinds.

    Raises:
        ConfigError: a ``workers.<name>.factory`` that cannot be loaded, a factory that
            does not return a ``WorkerDefinition``, two definitions of one kind, or a node id
            served by two kinds. An installed entry point that fails to load is logged and
            skipped (a broken third-party package does not stop the fleet).
    """
    wanted = None if names is None else set(names)
    definitions: dict[str, WorkerDefinition] = {}
    for name, load in sorted(_factories(config).items()):
        if wanted is not None and name not in wanted:
            continue
        try:
            factory = load()
        except ConfigError:
            raise
        except Exception as exc:  # an installed package's broken entry point
            logger.warning("worker kind %r cannot be loaded (%s); skipped", name,
                           type(exc).__name__)  # fmt: skip
            continue
        definition = factory(config)
        if not isinstance(definition, WorkerDefinition):
            raise ConfigError(f"worker factory {name!r} did not return a WorkerDefinition")
        if definition.kind in definitions:
            raise ConfigError(f"two worker definitions of kind {definition.kind}")
        definitions[definition.kind] = definition
    node_table(definitions.values())  # checks node ids are distinct
    return [definitions[kind] for kind in sorted(definitions)]


def node_table(
    definitions: Iterable[WorkerDefinition],
) -> dict[str, tuple[WorkerDefinition, NodeSpec]]:
    """Node id -> (its definition, its spec).

    Raises:
        ConfigError: a node id served by two definitions.
    """
    table: dict[str, tuple[WorkerDefinition, NodeSpec]] = {}
    for definition in definitions:
        for node, spec in definition.nodes.items():
            if node in table:
                raise ConfigError(f"node {node} is served by two worker definitions")
            table[node] = (definition, spec)
    return table
