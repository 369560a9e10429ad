"""Tenant scope: who a call acts for, bound by the trusted host, never by the request body.

The seed (memory-capabilities, "Long-term keys use ``<tenant>:<user>:memory:*``"; "Scope
enforcement covers all six Memory operations. The host authenticates identities; model
content cannot choose a namespace"; SPEC.md MEM-TASK-2, MEM-PY-3) asks for a scope that

* comes from the host's trusted side: the worker's config (``workers.memory.scope``), the
  service's :class:`~ditto_worker.fleet.client.DittoClient` (``scope=``, sent in the
  ``ditto_scope`` message header), or the direct SDK caller (``scope=``) — never from a
  node input, which has no field for it;
* is applied by the store plugin to all six operations, as an exact match on a
  namespace column: a record written in one scope is invisible to GET, QUERY and SEARCH,
  and unreachable for UPDATE and DELETE, from any other scope; keys are unique per scope;
  a request filter only narrows within the scope (it cannot name the namespace).

A :class:`Scope` ``(tenant, user)`` maps to the namespace string
``<tenant>:<user>:memory`` with each part percent-encoded (``urllib.parse.quote`` with
no safe characters), so a ``:`` or ``%`` inside a part can never make two scopes share
a namespace. Calls without a scope use the unscoped namespace ``""``, which no scope
maps to. Stores compare namespaces with ``=`` on bound parameters (never ``LIKE``), so
``_`` and ``%`` are ordinary characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from ditto_worker.contracts import LONE_SURROGATE, check_text
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "MAX_SCOPE_PART",
    "SCOPE_HEADER",
    "UNSCOPED",
    "Scope",
    "namespace_of",
    "encode_key_part",
    "parse_scope",
    "resolve_scope",
]

SCOPE_HEADER: Final = "ditto_scope"
"""Message header carrying ``{"tenant": str, "user": str}`` from the client to the worker."""

UNSCOPED: Final = ""
"""The namespace of calls made without a scope (single-tenant use)."""

MAX_SCOPE_PART: Final = 256
"""Most characters in a tenant or user id."""


def encode_key_part(part: str) -> str:
    """One part of a scoped key, percent-encoded (``urllib.parse.quote``, no safe
    characters): ``:`` becomes ``%3A`` and ``%`` becomes ``%25``, so distinct parts never
    join into the same key. The one encoding of every scoped key (MEMORY namespaces,
    CONTEXT cache keys)."""
    return quote(part, safe="")


@dataclass(frozen=True)
class Scope:
    """A trusted ``(tenant, user)`` pair; see the module docstring.

    Attributes:
        tenant: the tenant id, 1-256 characters, no control characters.
        user: the user id within the tenant, same rules.

    Raises:
        MemoryError: ``PERMISSION_DENIED`` naming ``scope.tenant`` / ``scope.user`` when a
            part is not such a string; ``INVALID_INPUT`` naming it when it holds a lone
            surrogate (not valid Unicode, e.g. a ``ditto_scope`` header ``"\\ud83d"``).
    """

    tenant: str
    user: str

    def __post_init__(self) -> None:
        for name in ("tenant", "user"):
            value = getattr(self, name)
            if not isinstance(value, str) or not 1 <= len(value) <= MAX_SCOPE_PART:
                raise MemoryError(
                    ErrorCode.PERMISSION_DENIED,
                    f"scope.{name} must be a string of 1-{MAX_SCOPE_PART} characters",
                )
            try:
                check_text(value)
            except ValueError:  # a malformed header, not an identity the host vouched for
                raise MemoryError(
                    ErrorCode.INVALID_INPUT, f"scope.{name} {LONE_SURROGATE}"
                ) from None
            if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
                raise MemoryError(
                    ErrorCode.PERMISSION_DENIED, f"scope.{name} contains a control character"
                )

    @property
    def namespace(self) -> str:
        """``<tenant>:<user>:memory`` with each part percent-encoded (never ``""``)."""
        return self.key("memory")

    def key(self, kind: str, *parts: str) -> str:
        """``<tenant>:<user>:<kind>[:<part>…]``, every element encoded with
        :func:`encode_key_part` (``Scope("acme", "a:b").key("context", "plan")`` ->
        ``acme:a%3Ab:context:plan``; the seed's key layout, memory-capabilities "Policy")."""
        return ":".join(encode_key_part(p) for p in (self.tenant, self.user, kind, *parts))

    def to_header(self) -> dict[str, str]:
        """The JSON value of the :data:`SCOPE_HEADER` header."""
        return {"tenant": self.tenant, "user": self.user}


def parse_scope(value: Any) -> Scope | None:
    """A :class:`Scope` from a header / config value (``None`` stays ``None``).

    Accepts a ``Scope`` or a mapping with exactly the string keys ``tenant`` and ``user``.

    Raises:
        MemoryError: ``PERMISSION_DENIED`` for anything else.
    """
    if value is None or isinstance(value, Scope):
        return value
    if not isinstance(value, Mapping) or set(value) != {"tenant", "user"}:
        raise MemoryError(ErrorCode.PERMISSION_DENIED, "scope must be {tenant, user}")
    return Scope(value["tenant"], value["user"])


def resolve_scope(bound: Scope | None, sent: Scope | None, required: bool) -> Scope | None:
    """The scope a call runs in: the worker's ``bound`` one, else the one ``sent`` by the
    client.

    Raises:
        MemoryError: ``PERMISSION_DENIED`` when ``sent`` differs from ``bound`` (a worker
            bound to one tenant never serves another), or when ``required`` and there is
            no scope at all.
    """
    if bound is not None and sent is not None and sent != bound:
        raise MemoryError(ErrorCode.PERMISSION_DENIED, "this worker serves another scope")
    scope = bound or sent
    if scope is None and required:
        raise MemoryError(ErrorCode.PERMISSION_DENIED, "this worker requires a scope")
    return scope


def namespace_of(options: Any) -> str:
    """The namespace a plugin must confine a call to: ``options.scope.namespace``, or
    :data:`UNSCOPED` when the call has no scope (``options`` may be ``None``)."""
    scope = getattr(options, "scope", None)
    return UNSCOPED if scope is None else str(scope.namespace)
