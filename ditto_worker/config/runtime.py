"""``RuntimeConfig``: the whole validated ``ditto.yaml`` tree, and ``ProcessSettings``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ditto_worker.config.context import ContextWorkerSettings
from ditto_worker.config.fleet import FleetSettings
from ditto_worker.config.infer import InferSettings
from ditto_worker.config.sections import (
    GraphSettings,
    MemoryWorkerSettings,
    NodeGroup,
    RetrievalWorkerSettings,
)
from ditto_worker.contracts import MemoryDefaults
from ditto_worker.errors import ConfigError

__all__ = ["OWNED_WORKER_SECTIONS", "ProcessSettings", "RuntimeConfig"]


OWNED_WORKER_SECTIONS = ("memory", "retrieval", "context", "infer")
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
