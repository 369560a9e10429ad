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
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ditto_worker.config_context import ContextWorkerSettings
from ditto_worker.config_env import OWNED_SECTIONS, apply_env
from ditto_worker.config_infer import InferSettings, load_infer_settings
from ditto_worker.contracts import NODE_IDS, Limit, MemoryDefaults
from ditto_worker.errors import ConfigError

__all__ = [
    "FleetSettings",
    "GraphSettings",
    "MemoryWorkerSettings",
    "NodeGroup",
    "ProcessSettings",
    "RetrievalTargetSettings",
    "RetrievalWorkerSettings",
    "RuntimeConfig",
    "check_fleet_url",
    "default_config",
    "load_runtime_config",
    "load_runtime_config_file",
]

logger = logging.getLogger(__name__)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        defer_build=True,  # built when a config is first loaded, not at import
    )


class FleetSettings(_Section):
    """``fleet:`` — where the queues live.

    An empty ``broker_url`` means "no server": commands run an in-process worker on
    kombu's ``memory://`` transport with a ``cache+memory://`` result backend (MEM-PY-7).
    """

    broker_url: str = Field(default="", description="Celery broker URL; env DITTO_BROKER_URL.")
    result_backend: str = Field(
        default="",
        description="Result backend URL; env DITTO_RESULT_BACKEND. Empty: the broker's Redis "
        "(or cache+memory:// in-process).",
    )
    call_timeout_s: float = Field(
        default=30.0, gt=0, description="Default client timeout per node call, seconds."
    )
    visibility_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="Redis transport: how long an unacknowledged message (a mutation whose "
        "worker died) waits before redelivery, seconds. Longer than the longest call.",
    )

    max_input_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Largest node input a worker accepts, bytes of JSON; larger is "
        "INVALID_INPUT before any handler runs (every node kind).",
    )

    start_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="How long a starting worker waits for the broker to answer and for a "
        "store it only reads (a retrieval target's) to appear, seconds; then it exits "
        "non-zero.",
    )
    time_limit_margin_s: float = Field(
        default=10.0,
        ge=0,
        description="Hard time limit of a call on a prefork worker: its deadline plus this "
        "margin, seconds; a pool process still running the call then is killed and replaced "
        "(the call fails). 0: none. The threads and solo pools enforce no time limit.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines of every ditto-worker process: text (UTC timestamp, level, "
        "process, logger, message) or json (one object per line).",
    )
    log_repeat_window_s: float = Field(
        default=60.0,
        ge=0,
        description="A warning or error repeating one logged less than this many seconds "
        "ago is dropped (counted in the next one logged); 0 keeps all.",
    )
    log_content: bool = Field(
        default=False,
        description="Debugging only: show node inputs and NodeResults (memory content, "
        "queries, filter values, model text) in worker logs, Celery events, Flower and "
        "celery inspect. false: ids, node, status, code, sizes and timings only.",
    )

    transport: str = Field(
        default="celery",
        description="How a client with a broker reaches the fleet: an installed "
        "ditto_worker.transports entry point (celery: Celery on the broker).",
    )
    sentinel_master_name: str = Field(
        default="",
        description="Redis Sentinel: the monitored master's name, for a sentinel:// broker "
        "and result backend (their transport option master_name).",
    )
    broker_transport_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Celery broker_transport_options over the fleet's own (e.g. "
        "sentinel_kwargs, socket_timeout); set key by key.",
    )
    result_backend_transport_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Celery result_backend_transport_options (e.g. sentinel_kwargs).",
    )

    @model_validator(mode="after")
    def _amqp_needs_a_result_backend(self) -> FleetSettings:
        scheme = self.broker_url.split("://", 1)[0].lower()
        if scheme in ("amqp", "amqps", "pyamqp") and not self.result_backend:
            raise ConfigError(
                "fleet.resultBackend / DITTO_RESULT_BACKEND is required with an amqp:// broker: "
                "a Redis URL (redis://host:6379/0); results and cancel flags live there"
            )
        return self

    @property
    def in_process(self) -> bool:
        """True when no broker is configured (the embedded default)."""
        return not self.broker_url or self.broker_url.startswith("memory://")

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _fleet_url(cls, value: str, info: ValidationInfo) -> str:
        name = "brokerUrl" if info.field_name == "broker_url" else "resultBackend"
        sources = info.context.get("sources", {}) if isinstance(info.context, dict) else {}
        return check_fleet_url(value, name, sources.get(name))


_BROKER_SCHEMES: Final = (
    "redis", "rediss", "redis+socket", "sentinel", "amqp", "amqps", "pyamqp", "memory",
)  # fmt: skip
_BACKEND_SCHEMES: Final = ("redis", "rediss", "redis+socket", "sentinel", "cache+memory")
_FLEET_ENV: Final = {"brokerUrl": "DITTO_BROKER_URL", "resultBackend": "DITTO_RESULT_BACKEND"}
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def check_fleet_url(url: str, setting: str, source: str | None = None) -> str:
    """Return ``url`` if it can be a broker (``setting`` ``brokerUrl``) or result backend
    (``resultBackend``) URL of the fleet; ``""`` is "not set".

    Checks what Celery would otherwise trip over much later (a ``redis//host`` typo ends
    in an import of a module named ``redis//host``): a ``scheme://`` prefix, a scheme the
    fleet runs on (broker: redis, rediss, redis+socket, sentinel, memory; result backend:
    the same with cache+memory instead of memory), a numeric port and a numeric Redis
    database (``/0``).

    Args:
        url: the value.
        setting: ``brokerUrl`` or ``resultBackend`` (``fleet.<setting>`` in ditto.yaml).
        source: where the value came from, for the message (e.g. ``env DITTO_BROKER_URL``);
            ``None``: ditto.yaml or the environment.

    Raises:
        ConfigError: naming the setting, its env variable and what is wrong; the URL
            itself is never shown (it may carry a password).
    """
    if not url:
        return url
    where = f"fleet.{setting}" + (f" (from {source})" if source else f" / {_FLEET_ENV[setting]}")
    for part in url.split(";"):  # sentinel://h1:26379;sentinel://h2:26379
        _check_one_url(part.strip(), setting, where)
    return url


def _check_one_url(url: str, setting: str, where: str) -> None:
    allowed = _BROKER_SCHEMES if setting == "brokerUrl" else _BACKEND_SCHEMES
    example = "redis://127.0.0.1:6379/0"
    match = _SCHEME.match(url)
    if match is None:
        raise ConfigError(
            f"{where}: not a URL: it must start with a scheme and '://', e.g. {example}"
        )
    scheme = match.group(1).lower()
    if scheme not in allowed:
        raise ConfigError(
            f"{where}: the scheme {scheme[:20]!r} is not one the fleet runs on; use one of "
            f"{', '.join(allowed)} (e.g. {example})"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ConfigError(f"{where}: the port is not a number from 1 to 65535") from None
    if scheme in ("redis", "rediss") and not re.fullmatch(r"/?(\d+)?", parts.path):
        raise ConfigError(f"{where}: the Redis database must be a number, e.g. {example}")


class NodeGroup(_Section):
    """A queue group served by one Celery worker process tree (one pool, one concurrency)."""

    nodes: list[str] = Field(description="Node ids of the group, e.g. [MEMORY.GET, MEMORY.QUERY].")
    concurrency: int = Field(ge=1, description="Pool size for this group's worker.")


def _default_groups() -> dict[str, NodeGroup]:
    return {
        "reads": NodeGroup(nodes=["MEMORY.GET", "MEMORY.QUERY"], concurrency=4),
        "writes": NodeGroup(
            nodes=["MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"], concurrency=2
        ),
        "search": NodeGroup(nodes=["MEMORY.SEARCH"], concurrency=2),
    }


class ScopeSettings(_Section):
    """``workers.memory.scope:`` — a trusted tenant scope (:mod:`ditto_worker.scope`)."""

    tenant: str = Field(min_length=1, max_length=256, description="Tenant id.")
    user: str = Field(min_length=1, max_length=256, description="User id within the tenant.")
    space: str = Field(
        default="memory",
        description="Space of calls that send no scope: 'memory' (long-term memories) or "
        "'task:<taskId>' (one task's checkpoints). A call's own scope may name any space of "
        "this tenant and user (MEM-TASK-2).",
    )


class MemoryWorkerSettings(_Section):
    """``workers.memory:`` — the MEMORY worker (seed: ``workers.memory.queryLimit`` …)."""

    query_limit: Limit = Field(default=100, description="Runtime default QUERY limit (MEM-CONF-2).")
    search_limit: Limit = Field(
        default=10, description="Runtime default SEARCH limit (MEM-CONF-2)."
    )
    store: str = Field(
        default="sqlite", description="Store plugin name (entry point group ditto_worker.stores)."
    )
    concurrency: int = Field(default=4, ge=1, description="Pool size when no group matches.")
    pool: Literal["prefork", "threads", "solo"] = Field(
        default="prefork", description="Celery pool of `ditto-worker worker`."
    )
    groups: dict[str, NodeGroup] = Field(
        default_factory=_default_groups, description="Named queue groups (--nodes NAME)."
    )
    search_target: str = Field(
        default="",
        description="Empty: MEMORY.SEARCH uses the store's native search. A target name: "
        "MEMORY.SEARCH delegates to RETRIEVAL.SEARCH on that target (MEM-RET-2).",
    )
    scope: ScopeSettings | None = Field(
        default=None,
        description="Bind the worker to one tenant scope {tenant, user}: every call runs in "
        "it; a call whose trusted header names another is PERMISSION_DENIED.",
    )
    require_scope: bool = Field(
        default=False, description="Refuse calls without a scope (PERMISSION_DENIED)."
    )
    state_db: str = Field(
        default="",
        description="Celery worker state file (--statedb): revoked task ids survive a "
        "restart. %n is the node name; empty: revokes are kept in memory only.",
    )

    def model_post_init(self, __context: Any) -> None:
        for name, group in self.groups.items():
            unknown = [n for n in group.nodes if n not in NODE_IDS]
            if unknown:
                raise ValueError(f"group {name!r} names unknown nodes {unknown}")


class RetrievalTargetSettings(_Section):
    """``workers.retrieval.targets.<name>`` — one search pipeline RETRIEVAL.SEARCH serves."""

    store: str = Field(
        default="sqlite",
        description="Store plugin holding the memories (its settings: plugins.<store>).",
    )
    pipeline: dict[str, Any] = Field(
        default_factory=dict,
        description="Pipeline settings (strategy, fusion, rerank, embedding), passed to "
        "ditto_worker.retrieval; empty: the store's native search.",
    )


class RetrievalWorkerSettings(_Section):
    """``workers.retrieval:`` — the RETRIEVAL worker on the ``retrieval.search`` queue."""

    concurrency: int = Field(default=2, ge=1, description="Pool size of the retrieval worker.")
    pool: Literal["prefork", "threads", "solo"] = Field(
        default="threads",
        description="Celery pool; threads let concurrent queries share one model (micro-batching).",
    )
    search_limit: Limit = Field(default=10, description="Runtime default SEARCH limit.")
    targets: dict[str, RetrievalTargetSettings] = Field(
        default_factory=lambda: {"memories": RetrievalTargetSettings()},
        description="Target name -> pipeline; RemoteRetrievalSearchProvider(target={name}).",
    )
    state_db: str = Field(
        default="", description="Celery worker state file (--statedb), as workers.memory."
    )


class GraphSettings(_Section):
    """``graph:`` — Graph and Loop defaults (SPEC.md MEM-GRAPH)."""

    loop_budget: int = Field(
        default=1024,
        ge=1,
        description="Graphs one runtime.loop() may run, sub-plans, recovery and repeated "
        "stages included (the seed's 1024-Graph budget); past it GRAPH_BUDGET_EXHAUSTED.",
    )


OWNED_WORKER_SECTIONS = ("memory", "retrieval", "context", "infer")
APP_SECTIONS = ("gateway",)
"""Top-level sections ditto-worker's apps read and validate themselves (``gateway``:
:mod:`ditto_worker.gateway.settings`); the runtime config leaves them alone, silently."""
"""``workers.<name>`` sections this project's config validates strictly."""


class ProcessSettings(BaseModel):
    """How ``ditto-worker worker`` runs the nodes of one worker kind (any kind).

    Read from ``workers.<name>``: the typed sections of this project, or — for a kind of
    another package — the keys ``concurrency``, ``pool``, ``stateDb`` and ``groups`` of its
    section (its other keys are left to it, MEM-PY-7).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    concurrency: int = Field(default=4, ge=1, description="Pool size.")
    pool: Literal["prefork", "threads", "solo"] = Field(default="prefork", description="Pool.")
    state_db: str = Field(default="", description="Celery worker state file (--statedb).")
    groups: dict[str, NodeGroup] = Field(
        default_factory=dict, description="Named queue groups of this kind (--nodes NAME)."
    )


class RuntimeConfig(BaseModel):
    """The whole validated config. ``memory`` is the seed's ``config.memory`` defaults."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    fleet: FleetSettings = Field(default_factory=FleetSettings)
    graph: GraphSettings = Field(default_factory=GraphSettings)
    memory_worker: MemoryWorkerSettings = Field(default_factory=MemoryWorkerSettings)
    retrieval_worker: RetrievalWorkerSettings = Field(default_factory=RetrievalWorkerSettings)
    context_worker: ContextWorkerSettings = Field(default_factory=ContextWorkerSettings)
    infer_worker: InferSettings = Field(
        default_factory=InferSettings,
        description="workers.infer, with DITTO_WORKER_INFER_* from the env or .env applied.",
    )
    plugins: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="plugins.<name>: settings owned by each plugin."
    )
    worker_sections: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="workers.<name> sections of kinds this project does not own, as written "
        "(a `factory: module:function` key adds a worker kind; MEM-RT-1).",
    )
    source: str | None = Field(default=None, description="The file it was loaded from.")

    @property
    def memory(self) -> MemoryDefaults:
        """Runtime YAML limits, the third layer of MEM-CONF-2 (pass as ``defaults=``)."""
        return MemoryDefaults(
            query_limit=self.memory_worker.query_limit,
            search_limit=self.memory_worker.search_limit,
        )

    def plugin_settings(self, name: str) -> dict[str, Any]:
        """Settings of plugin ``name`` (``{}`` when the file has none)."""
        return dict(self.plugins.get(name) or {})

    def worker_section(self, name: str) -> dict[str, Any]:
        """The ``workers.<name>`` section as written (owned sections as validated)."""
        owned = {
            "memory": self.memory_worker,
            "retrieval": self.retrieval_worker,
            "context": self.context_worker,
            "infer": self.infer_worker,
        }.get(name)
        if owned is not None:
            return owned.model_dump(by_alias=True)
        return dict(self.worker_sections.get(name) or {})

    def process_settings(self, name: str) -> ProcessSettings:
        """Pool, concurrency, state db and groups of the worker kind ``name`` (lower case).

        Raises:
            ConfigError: a foreign section whose process keys are invalid.
        """
        section = self.worker_section(name)
        keys = {"concurrency", "pool", "stateDb", "groups"}
        picked = {k: v for k, v in section.items() if k in keys}
        try:
            return ProcessSettings.model_validate({_snake(k): v for k, v in picked.items()})
        except ValidationError as exc:
            raise ConfigError(f"invalid workers.{name}: {exc}") from exc

    def defaults_for(self, kind: str) -> MemoryDefaults | None:
        """The runtime-YAML defaults layer a kind's handlers get (``NodeContext.defaults``;
        MEM-CONF-2): MEMORY's limits, RETRIEVAL's search limit, ``None`` for others."""
        if kind == "MEMORY":
            return self.memory
        if kind == "RETRIEVAL":
            return MemoryDefaults(search_limit=self.retrieval_worker.search_limit)
        return None


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


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
    (camelCase) names: what :mod:`ditto_worker.config_env` reads keys from."""
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
    raw, _ = apply_env(raw, defaults_tree(), env)  # DITTO_<...> for every key (config_env)
    fleet = _section(raw, "fleet", "")
    sources = {key: source or "ditto.yaml" for key in _FLEET_ENV if fleet.get(key)}
    for key, var in _FLEET_ENV.items():
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
