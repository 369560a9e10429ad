"""Runtime configuration: ``ditto.yaml`` with ``${VAR}`` expansion, then ``DITTO_*`` env.

One typed tree, validated at start-up and frozen (MEM-CONF-4: a snapshot, never re-read
per request). The sections this project owns (``fleet``, ``graph``, ``workers.memory``,
``workers.retrieval``, ``workers.context``, ``workers.infer``) reject
unknown keys; other workers' sections of a shared ``ditto.yaml`` and other top-level keys
are left alone (MEM-PY-7). Plugin sections (``plugins.<name>``) belong to their plugin
and are passed to it unchanged.

String values may use ``${VAR}`` (an unset variable is a :class:`ConfigError`) and
``${VAR:-default}``. After expansion, ``DITTO_BROKER_URL`` and ``DITTO_RESULT_BACKEND``
override ``fleet.brokerUrl`` / ``fleet.resultBackend`` (MEM-PY-7), and
``DITTO_WORKER_CONTEXT_REDIS_URL`` overrides ``workers.context.redisUrl``. The broker and
result-backend URLs are checked on load (:func:`check_fleet_url`): a typo is a
:class:`ConfigError` naming the setting, not a Celery traceback. Database URLs and
credentials come only from the environment, read by the plugins (MEM-CONF-5).
``workers.infer`` takes ``DITTO_WORKER_INFER_BASE_URL``/``_MODEL``/``_API_KEY`` from the
environment or ``./.env`` (:func:`ditto_worker.infer.load_infer_settings`; the key never
from the file).

One package, ``ditto_worker/config/`` (below the runtime, above the scope and contracts):
:mod:`.fleet` (``fleet:``, URL checks), :mod:`.sections` (``workers.memory``,
``workers.retrieval``, ``graph``), :mod:`.context` and :mod:`.infer` (``workers.context``,
``workers.infer``), :mod:`.runtime` (``RuntimeConfig``), :mod:`.loading` (the file, the
expansion, the checks), :mod:`.env` (the one ``DITTO_*`` rule). This ``__init__`` is light:
it imports none of them; ``from ditto_worker.config import RuntimeConfig`` loads the module
that defines the name on first use, so a worker kind importing :mod:`.context` or
:mod:`.infer` does not load the runtime config models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ditto_worker.config.context import ContextWorkerSettings
    from ditto_worker.config.env import OWNED_SECTIONS, apply_env
    from ditto_worker.config.fleet import FleetSettings, check_fleet_url
    from ditto_worker.config.infer import InferSettings, load_infer_settings
    from ditto_worker.config.loading import (
        APP_SECTIONS,
        default_config,
        defaults_tree,
        load_runtime_config,
        load_runtime_config_file,
    )
    from ditto_worker.config.runtime import OWNED_WORKER_SECTIONS, ProcessSettings, RuntimeConfig
    from ditto_worker.config.sections import (
        GraphSettings,
        MemoryWorkerSettings,
        NodeGroup,
        RetrievalTargetSettings,
        RetrievalWorkerSettings,
        ScopeSettings,
    )

__all__ = [
    "APP_SECTIONS",
    "OWNED_SECTIONS",
    "OWNED_WORKER_SECTIONS",
    "ContextWorkerSettings",
    "FleetSettings",
    "GraphSettings",
    "InferSettings",
    "MemoryWorkerSettings",
    "NodeGroup",
    "ProcessSettings",
    "RetrievalTargetSettings",
    "RetrievalWorkerSettings",
    "RuntimeConfig",
    "ScopeSettings",
    "apply_env",
    "check_fleet_url",
    "default_config",
    "defaults_tree",
    "load_infer_settings",
    "load_runtime_config",
    "load_runtime_config_file",
]

_HOMES: dict[str, str] = {
    "FleetSettings": "fleet",
    "check_fleet_url": "fleet",
    "GraphSettings": "sections",
    "MemoryWorkerSettings": "sections",
    "NodeGroup": "sections",
    "RetrievalTargetSettings": "sections",
    "RetrievalWorkerSettings": "sections",
    "ScopeSettings": "sections",
    "OWNED_WORKER_SECTIONS": "runtime",
    "ProcessSettings": "runtime",
    "RuntimeConfig": "runtime",
    "APP_SECTIONS": "loading",
    "default_config": "loading",
    "defaults_tree": "loading",
    "load_runtime_config": "loading",
    "load_runtime_config_file": "loading",
    "ContextWorkerSettings": "context",
    "InferSettings": "infer",
    "load_infer_settings": "infer",
    "OWNED_SECTIONS": "env",
    "apply_env": "env",
}
"""Public name -> the module of this package that defines it."""


def __getattr__(name: str) -> Any:
    """``ditto_worker.config.<name>``: imported from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
