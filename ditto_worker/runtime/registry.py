"""Store plugins by name, through the ``ditto_worker.stores`` entry point group.

Used only when a worker process builds its plugin from ``ditto.yaml`` (MEM-PY-1); the SDK
factories take plugin objects and never come here. A plugin's entry point names a
factory ``create_store(settings: dict, env: Mapping[str, str]) -> MemoryStore``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from ditto_worker.config import RuntimeConfig
from ditto_worker.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "available_stores", "build_store"]

ENTRY_POINT_GROUP = "ditto_worker.stores"

StoreFactory = Callable[[dict[str, Any], Mapping[str, str]], Any]


def available_stores() -> list[str]:
    """Names of the installed store plugins, sorted."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def build_store(
    config: RuntimeConfig, name: str | None = None, env: Mapping[str, str] | None = None
) -> Any:
    """Build the store plugin ``name`` (default ``workers.memory.store``) for this process.

    Args:
        config: the runtime config; ``plugins.<name>`` is passed to the factory.
        name: plugin name; overrides ``workers.memory.store``.
        env: environment for the plugin's ``DITTO_WORKER_MEMORY_<PLUGIN>_*`` settings.

    Raises:
        ConfigError: no installed plugin has that name.
    """
    name = name or config.memory_worker.store
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        raise ConfigError(
            f"no store plugin named {name!r}; installed: {', '.join(available_stores()) or 'none'}"
        )
    factory: StoreFactory = matches[0].load()
    return factory(config.plugin_settings(name), os.environ if env is None else env)
