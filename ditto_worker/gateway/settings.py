"""The ``gateway:`` section of ``ditto.yaml``: who may call the HTTP gateway, and its bounds.

The gateway (issue 26, SPEC.md MEM-RUN-5) takes the trusted scope from the verified
identity only. An identity is either a static bearer token, listed by the SHA-256 hex
digest of the token (the token itself never sits in a file), or a JWT verified against a
configured key with PyJWT::

    gateway:
      tokens:
        - sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
          tenant: t1
          user: u1
          nodes: ["MEMORY.GET", "MEMORY.SEARCH"]   # default: every node
          spaces: ["memory", "task:*"]              # default: ["memory"]
      jwt:
        keyEnv: DITTO_GATEWAY_JWT_KEY     # the HMAC secret or PEM public key, from the env
        algorithms: [RS256]
        tenantClaim: tenant
        userClaim: sub

The section is the gateway's own; the runtime config leaves unknown top-level sections
alone, so one ``ditto.yaml`` serves workers and gateways.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from ditto_worker.errors import ConfigError

__all__ = [
    "GatewaySettings",
    "JwtSettings",
    "McpSettings",
    "StaticToken",
    "load_gateway_settings",
]


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


class _Grants(_Section):
    nodes: tuple[str, ...] = Field(
        default=("*",),
        description="Node ids this identity may call; shell-style patterns (``MEMORY.*``). "
        "Default: every node. A node not matched is 403.",
    )
    spaces: tuple[str, ...] = Field(
        default=("memory",),
        description="Spaces this identity may use (``memory``, ``task:*`` for a task "
        "controller); the call's space is chosen among them with the ``Ditto-Space`` "
        "header. A space not matched is 403.",
    )

    def allows_node(self, node: str) -> bool:
        """True when ``node`` matches one of :attr:`nodes` (case-sensitive)."""
        return any(fnmatch.fnmatchcase(node, pattern) for pattern in self.nodes)

    def allows_space(self, space: str) -> bool:
        """True when ``space`` matches one of :attr:`spaces` (case-sensitive)."""
        return any(fnmatch.fnmatchcase(space, pattern) for pattern in self.spaces)


class StaticToken(_Grants):
    """A static bearer token, bound to one ``(tenant, user)``."""

    sha256: str = Field(
        description="SHA-256 hex digest of the token (``printf %s TOKEN | sha256sum``)."
    )
    tenant: str = Field(min_length=1, max_length=256, description="The bound tenant.")
    user: str = Field(min_length=1, max_length=256, description="The bound user.")

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        value = value.strip().lower()
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            raise ValueError("must be 64 hex digits (the SHA-256 digest of the token)")
        return value


class JwtSettings(_Grants):
    """JWTs verified with PyJWT: signature, ``exp``/``nbf``, audience and issuer."""

    key_env: str = Field(
        default="DITTO_GATEWAY_JWT_KEY",
        description="Env var holding the HMAC secret or the PEM public key (secrets only "
        "from the env).",
    )
    jwks_url: str = Field(
        default="",
        description="A JWKS URL (PyJWT's PyJWKClient) instead of a key; the token's ``kid`` "
        "picks the key.",
    )
    algorithms: tuple[str, ...] = Field(
        default=("RS256",), min_length=1, description="Accepted algorithms (never ``none``)."
    )
    audience: str | None = Field(default=None, description="Required ``aud``, if set.")
    issuer: str | None = Field(default=None, description="Required ``iss``, if set.")
    tenant_claim: str = Field(default="tenant", description="The claim carrying the tenant.")
    user_claim: str = Field(default="sub", description="The claim carrying the user.")
    leeway_s: float = Field(default=30.0, ge=0, description="Clock skew allowed, seconds.")

    @field_validator("algorithms")
    @classmethod
    def _no_none(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(a.lower() == "none" for a in value):
            raise ValueError("the 'none' algorithm is never accepted")
        return value

    def key(self) -> str:
        """The verification key from :attr:`key_env`.

        Raises:
            ConfigError: neither the env var nor :attr:`jwks_url` is set.
        """
        value = os.environ.get(self.key_env, "")
        if not value and not self.jwks_url:
            raise ConfigError(f"gateway.jwt: set the env var {self.key_env} or gateway.jwt.jwksUrl")
        return value


class McpSettings(_Section):
    """``gateway.mcp:`` — the MCP endpoint ``/mcp`` (docs/integrations-mcp.md)."""

    enabled: bool = Field(
        default=True,
        description="Serve the MEMORY nodes as MCP tools at ``/mcp`` (needs the ``mcp`` "
        "extra; without it the gateway serves no ``/mcp`` and says so once).",
    )
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        description="``Host`` headers ``/mcp`` accepts besides loopback names "
        "(``name:port`` or ``name:*``): the public name of a proxy in front. Any other is "
        "421 (the MCP SDK's DNS-rebinding protection).",
    )
    resource_url: str | None = Field(
        default=None,
        description="The public URL of ``/mcp`` (``https://memory.example.com/mcp``). With "
        "``gateway.jwt.issuer`` also set, ``/.well-known/oauth-protected-resource/mcp`` "
        "advertises that issuer as the authorization server (RFC 9728) and a 401 points "
        "at it; otherwise no metadata is served.",
    )
    artifacts_dir: Path = Field(
        default=Path(".ditto/artifacts"),
        description="Where the task tools (``memory_task_search``, ``memory_task_write``) "
        "publish their artifacts, one folder per tenant and user inside it; relative to "
        "the server's working folder.",
    )


class GatewaySettings(_Section):
    """``gateway:`` — identities and bounds of ``ditto-worker serve``."""

    mcp: McpSettings = Field(default_factory=McpSettings, description="The MCP endpoint ``/mcp``.")

    tokens: tuple[StaticToken, ...] = Field(default=(), description="Static bearer tokens.")
    jwt: JwtSettings | None = Field(default=None, description="JWT verification, if used.")
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest request body, bytes; larger is 413 before the body is read whole.",
    )
    max_in_flight: int = Field(
        default=256, ge=1, description="Calls in flight at once; more are 429 with Retry-After."
    )
    max_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="Cap on the caller's ``Ditto-Timeout`` header, seconds; the default "
        "deadline is ``fleet.callTimeoutS``.",
    )
    cors_origins: tuple[str, ...] = Field(
        default=(), description="Origins allowed by CORS; empty: CORS off (the default)."
    )
    shutdown_grace_s: float = Field(
        default=30.0, ge=0, description="How long a stopping server waits for calls in flight."
    )
    keep_alive_s: int = Field(
        default=75,
        ge=1,
        description="How long an idle keep-alive connection stays open, seconds (uvicorn's "
        "``timeout_keep_alive``, whose own default is 5). Longer than the 60 s idle "
        "timeout of common proxies and load balancers, so the side in front closes idle "
        "connections first and never reuses one the server is closing.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long a request's headers may take to arrive, seconds, from the "
        "connection's opening (or the request's first byte on a kept-alive connection); "
        "then 408 and the connection is closed (nothing was read yet: closed silently). "
        "Checked before the identity is known.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a request's body may take to arrive after its headers, "
        "seconds; then 408 and the connection is closed. A call takes an in-flight slot "
        "only once its body is read, so a slow body holds a connection, never a slot.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Largest request line and headers, bytes; larger is 431 and the "
        "connection is closed before the rest is read.",
    )
    max_headers: int = Field(
        default=100, ge=8, description="Most header fields in one request; more is 431."
    )
    max_connections: int = Field(
        default=4096,
        ge=1,
        description="Open connections per server process; one more is answered 429 "
        "(``Retry-After: 1``) and closed at once. Keep it under the process's open-file "
        "limit (``ulimit -n``).",
    )
    identity_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="The share of ``maxInFlight`` one identity (a token's, or a JWT's "
        "tenant and user) may hold at once, and of bodies being read; unauthenticated "
        "requests share one such identity. More is 429 with ``Retry-After``.",
    )
    identity_rate_per_s: float = Field(
        default=500.0,
        gt=0,
        description="Requests per second one identity may make on average (a token "
        "bucket); more is 429 with ``Retry-After``.",
    )
    identity_burst: int = Field(
        default=1000,
        ge=1,
        description="The token bucket's size: requests one identity may make at once "
        "above its rate.",
    )
    max_json_depth: int = Field(
        default=64,
        ge=2,
        description="Deepest nesting of a JSON body (arrays and objects); deeper is 422 "
        "INVALID_INPUT before the body reaches a node.",
    )
    access_log: bool = Field(
        default=False,
        description="uvicorn's access log: one line per request (client address, method, "
        "path, status; never a token or a body). Off by default: writing it cost the "
        "gateway 0.35-0.75 ms per call at one caller (bench/gateway.py); ``/metrics`` "
        "counts every call by node and status either way.",
    )


def load_gateway_settings(path: str | Path | None) -> GatewaySettings:
    """The ``gateway:`` section of ``path`` (defaults when the file or section is absent).

    Raises:
        ConfigError: the file cannot be parsed, or the section is invalid (unknown keys,
            a malformed digest, the ``none`` algorithm …).
    """
    raw: Any = {}
    if path is not None and Path(path).exists():
        import yaml

        try:
            raw = (yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}).get("gateway")
        except (yaml.YAMLError, AttributeError) as exc:
            raise ConfigError(f"{path}: not a YAML mapping ({type(exc).__name__})") from None
    try:
        return GatewaySettings.model_validate(_with_env(raw or {}, os.environ))
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"gateway.{where}: {first['msg']}") from None


def _with_env(raw: Any, env: Mapping[str, str]) -> Any:
    """``raw`` with ``DITTO_GATEWAY_<KEY>`` applied to every scalar and list key of the
    section (the config's one environment rule, ``ditto_worker.config.env``); the
    ``tokens`` and ``jwt`` keys are the file's only."""
    from ditto_worker.config.env import apply_env

    if not isinstance(raw, Mapping):
        return raw
    defaults = GatewaySettings().model_dump(by_alias=True, exclude={"tokens", "jwt"})
    defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    data, _ = apply_env({"gateway": dict(raw)}, {"gateway": defaults}, env)
    return data["gateway"]
