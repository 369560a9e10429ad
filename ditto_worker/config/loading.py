"""Loading ``ditto.yaml``: ``${VAR}`` expansion, section checks, ``DITTO_*`` env, validation."""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ditto_worker.config.context import ContextWorkerSettings
from ditto_worker.config.env import OWNED_SECTIONS, apply_env
from ditto_worker.config.fleet import FLEET_ENV, FleetSettings
from ditto_worker.config.infer import InferSettings, load_infer_settings
from ditto_worker.config.runtime import OWNED_WORKER_SECTIONS, RuntimeConfig
from ditto_worker.config.sections import (
    GraphSettings,
    MemoryWorkerSettings,
    RetrievalWorkerSettings,
)
from ditto_worker.errors import ConfigError

__all__ = [
    "APP_SECTIONS",
    "default_config",
    "defaults_tree",
    "load_runtime_config",
    "load_runtime_config_file",
]

APP_SECTIONS = ("gateway", "tasks")
"""Top-level sections ditto-worker's apps read and validate themselves (``gateway``:
:mod:`ditto_worker.gateway.settings`; ``tasks``: :mod:`ditto_worker.memory_tasks.
policy_config`); the runtime config leaves them alone, silently."""

logger = logging.getLogger("ditto_worker.config")  # the package's logger, as before the split

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(value, dict):
        return {k: _expand(v, env, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and (env[name] != "" or default is None):
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: environment variable {name} is not set")

    return _VAR.sub(sub, value)


def _section(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}{key}: must be a mapping")
    return value


@lru_cache(maxsize=1)
def defaults_tree() -> dict[str, Any]:
    """The built-in defaults of the sections this project owns, with ``ditto.yaml``'s
    (camelCase) names: what :mod:`ditto_worker.config.env` reads keys from."""
    return {
        "fleet": FleetSettings().model_dump(by_alias=True),
        "graph": GraphSettings().model_dump(by_alias=True),
        "workers": {
            "memory": MemoryWorkerSettings().model_dump(by_alias=True),
            "retrieval": RetrievalWorkerSettings().model_dump(by_alias=True),
            "context": ContextWorkerSettings().model_dump(by_alias=True),
            "infer": InferSettings().model_dump(by_alias=True),
        },
    }


def _near_miss(name: str, owned: tuple[str, ...]) -> str | None:
    if name in owned:
        return None
    close = difflib.get_close_matches(name.lower(), owned, n=1, cutoff=0.75)
    return close[0] if close else None


def _check_sections(raw: Mapping[str, Any], source: str | None) -> None:
    """A top-level key (or ``workers.<name>`` without a factory) that is a near-miss of
    one this project owns is an error (``fleeet``); other unknown top-level sections belong
    to other programs sharing the file (MEM-PY-7): a warning."""
    where = source or "ditto.yaml"
    for key in raw:
        guess = _near_miss(str(key), (*OWNED_SECTIONS, *APP_SECTIONS))
        if guess:
            raise ConfigError(
                f"{where}: unknown section {str(key)[:40]!r}; did you mean {guess!r}?"
            )
        if key not in OWNED_SECTIONS and key not in APP_SECTIONS:
            logger.warning("%s: section %r is not ditto-worker's; left alone", where,
                           str(key)[:40])  # fmt: skip
    workers = raw.get("workers")
    for name, section in workers.items() if isinstance(workers, Mapping) else ():
        has_factory = isinstance(section, Mapping) and "factory" in section
        guess = _near_miss(str(name), OWNED_WORKER_SECTIONS)
        if guess and not has_factory:
            raise ConfigError(
                f"{where}: unknown worker section workers.{str(name)[:40]}; did you mean "
                f"workers.{guess}?"
            )


def load_runtime_config(
    data: Mapping[str, Any] | None, env: Mapping[str, str] | None = None, source: str | None = None
) -> RuntimeConfig:
    """Validate an already-parsed ``ditto.yaml`` mapping (``None`` = all defaults).

    Raises:
        ConfigError: an unknown key in an owned section, a bad value, or an unset ``${VAR}``.
    """
    env = os.environ if env is None else env
    raw = _expand(dict(data or {}), env, "ditto.yaml")
    _check_sections(raw, source)
    raw, _ = apply_env(raw, defaults_tree(), env)  # DITTO_<...> for every key (config.env)
    fleet = _section(raw, "fleet", "")
    sources = {key: source or "ditto.yaml" for key in FLEET_ENV if fleet.get(key)}
    for key, var in FLEET_ENV.items():
        if env.get(var):
            fleet[key], sources[key] = env[var], f"env {var}"
    workers = _section(raw, "workers", "")
    try:
        return RuntimeConfig(
            fleet=FleetSettings.model_validate(fleet, context={"sources": sources}),
            graph=GraphSettings.model_validate(_section(raw, "graph", "")),
            memory_worker=MemoryWorkerSettings.model_validate(
                _section(workers, "memory", "workers.")
            ),
            retrieval_worker=RetrievalWorkerSettings.model_validate(
                _section(workers, "retrieval", "workers.")
            ),
            context_worker=ContextWorkerSettings.from_env(
                _section(workers, "context", "workers."), env
            ),
            infer_worker=load_infer_settings(_section(workers, "infer", "workers."), env),
            plugins={k: dict(v or {}) for k, v in _section(raw, "plugins", "").items()},
            worker_sections={
                name: dict(value)
                for name, value in workers.items()
                if name not in OWNED_WORKER_SECTIONS and isinstance(value, dict)
            },  # fmt: skip
            source=source,
        )
    except (ValidationError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid config{f' in {source}' if source else ''}: {exc}") from exc


def load_runtime_config_file(
    path: str | os.PathLike[str] = "ditto.yaml", env: Mapping[str, str] | None = None
) -> RuntimeConfig:
    """Load and validate a ``ditto.yaml`` (the seed's ``loadRuntimeConfigFile``).

    Args:
        path: the YAML file.
        env: variables for ``${VAR}`` expansion and ``DITTO_*`` overrides; ``os.environ``
            when ``None``.

    Raises:
        ConfigError: the file is missing or unreadable, is not a YAML mapping, or fails
            validation.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}") from exc
    import yaml  # only when a file is read: importing the SDK loads no YAML parser

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file} is not valid YAML") from exc
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{file} must contain a YAML mapping")
    return load_runtime_config(data, env, source=str(file))


def default_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> RuntimeConfig:
    """Config for the CLI: ``path`` if given, else ``./ditto.yaml`` if present, else defaults."""
    if path is not None:
        return load_runtime_config_file(path, env)
    if Path("ditto.yaml").is_file():
        return load_runtime_config_file("ditto.yaml", env)
    return load_runtime_config(None, env)
