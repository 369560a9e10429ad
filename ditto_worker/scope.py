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

A :class:`Scope` ``(tenant, user, space)`` maps to the namespace string
``<tenant>:<user>:memory`` (the default space ``memory``: long-term memories) or
``<tenant>:<user>:task:<taskId>`` (space ``task:<taskId>``: one task's checkpoints;
SPEC.md MEM-TASK-2), each part percent-encoded (``urllib.parse.quote`` with no safe
characters), so a ``:`` or ``%`` inside a part can never make two scopes share a
namespace. The space is the host's, like tenant and user: no node input names it, so no
filter, key or model output reaches another space; a store confines every operation to
the namespace, so the spaces of one user are as isolated as two users.

Calls without a scope use the unscoped namespace ``""``, which no scope maps to. Stores
compare namespaces with ``=`` on bound parameters (never ``LIKE``), so ``_`` and ``%``
are ordinary characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from ditto_worker.contracts import LONE_SURROGATE, check_text
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "DEFAULT_SPACE",
    "MAX_SCOPE_PART",
    "SCOPE_HEADER",
    "SCOPE_HOWTO",
    "TASK_SPACE_PREFIX",
    "UNSCOPED",
    "Scope",
    "namespace_of",
    "encode_key_part",
    "missing_scope",
    "parse_scope",
    "resolve_scope",
]

SCOPE_HEADER: Final = "ditto_scope"
"""Message header carrying ``{"tenant": str, "user": str, "space"?: str}`` from the client
to the worker (``space`` only when it is not :data:`DEFAULT_SPACE`, so a worker that
predates spaces refuses a task-space call instead of serving it in ``memory``)."""

DEFAULT_SPACE: Final = "memory"
"""The space of long-term memories (the seed's ``<tenant>:<user>:memory:*``)."""

TASK_SPACE_PREFIX: Final = "task:"
"""A task's checkpoint space is ``task:<taskId>`` (keys ``<tenant>:<user>:task:<taskId>:*``)."""

UNSCOPED: Final = ""
"""The namespace of calls made without a scope (single-tenant use)."""

MAX_SCOPE_PART: Final = 256
"""Most characters in a tenant id, user id or task id."""

_SCOPE_KEYS: Final = frozenset({"tenant", "user", "space"})

SCOPE_HOWTO: Final = (
    "give the call a trusted scope: scope={'tenant': ..., 'user': ...} in Python "
    "(create_ditto, DittoClient, invoke), or --scope tenant=...,user=... on the "
    "ditto-worker command line (invoke, demo)"
)
"""Where a scope comes from, appended to every ``PERMISSION_DENIED`` for a missing one."""


def missing_scope(needs: str) -> str:
    """The safe message of a ``PERMISSION_DENIED`` for a call without a scope: what
    ``needs`` one (``"this worker requires a scope"``), then :data:`SCOPE_HOWTO`. Every
    kind (MEMORY, RETRIEVAL, CONTEXT, INFER, kinds found by entry point) words it so."""
    return f"{needs}; {SCOPE_HOWTO}"


def encode_key_part(part: str) -> str:
    """One part of a scoped key, percent-encoded (``urllib.parse.quote``, no safe
    characters): ``:`` becomes ``%3A`` and ``%`` becomes ``%25``, so distinct parts never
    join into the same key. The one encoding of every scoped key (MEMORY namespaces,
    CONTEXT cache keys)."""
    return quote(part, safe="")


def _check_part(name: str, value: object) -> None:
    """Raise unless ``value`` is a 1-256 character string without control characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_SCOPE_PART:
        raise MemoryError(
            ErrorCode.PERMISSION_DENIED,
            f"{name} must be a string of 1-{MAX_SCOPE_PART} characters",
        )
    try:
        check_text(value)
    except ValueError:  # a malformed header, not an identity the host vouched for
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{name} {LONE_SURROGATE}") from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise MemoryError(ErrorCode.PERMISSION_DENIED, f"{name} contains a control character")


@dataclass(frozen=True)
class Scope:
    """A trusted ``(tenant, user, space)``; see the module docstring.

    Attributes:
        tenant: the tenant id, 1-256 characters, no control characters.
        user: the user id within the tenant, same rules.
        space: :data:`DEFAULT_SPACE` (``"memory"``, long-term memories) or
            ``"task:<taskId>"`` (one task's checkpoints; ``taskId`` follows the same rules
            as ``user``). Set by the host, never by a node input (SPEC.md MEM-TASK-2).

    Raises:
        MemoryError: ``PERMISSION_DENIED`` naming ``scope.tenant`` / ``scope.user`` /
            ``scope.space`` when a part is not such a string (or the space is neither
            ``memory`` nor ``task:<taskId>``); ``INVALID_INPUT`` naming it when it holds a
            lone surrogate (not valid Unicode, e.g. a ``ditto_scope`` header
            ``"\\ud83d"``).
    """

    tenant: str
    user: str
    space: str = DEFAULT_SPACE

    def __post_init__(self) -> None:
        _check_part("scope.tenant", self.tenant)
        _check_part("scope.user", self.user)
        if self.space == DEFAULT_SPACE:
            return
        if not isinstance(self.space, str) or not self.space.startswith(TASK_SPACE_PREFIX):
            raise MemoryError(
                ErrorCode.PERMISSION_DENIED, "scope.space must be 'memory' or 'task:<taskId>'"
            )
        _check_part("scope.space taskId", self.space[len(TASK_SPACE_PREFIX) :])

    @classmethod
    def for_task(cls, tenant: str, user: str, task_id: str) -> Scope:
        """The checkpoint scope of task ``task_id``: space ``task:<task_id>``."""
        return cls(tenant, user, TASK_SPACE_PREFIX + task_id)

    def in_space(self, space: str) -> Scope:
        """This tenant and user in ``space`` (validated as :attr:`space`)."""
        return Scope(self.tenant, self.user, space)

    @property
    def owner(self) -> tuple[str, str]:
        """``(tenant, user)``: whose memories these are, whatever the space."""
        return (self.tenant, self.user)

    @property
    def task_id(self) -> str | None:
        """The ``taskId`` of a ``task:<taskId>`` space; ``None`` in ``memory``."""
        if self.space == DEFAULT_SPACE:
            return None
        return self.space[len(TASK_SPACE_PREFIX) :]

    def _prefix(self) -> tuple[str, ...]:
        task_id = self.task_id
        owner = (self.tenant, self.user)
        return owner if task_id is None else (*owner, "task", task_id)

    @property
    def namespace(self) -> str:
        """``<tenant>:<user>:memory`` or ``<tenant>:<user>:task:<taskId>``, each part
        percent-encoded (never ``""``): the store namespace of the scope's space."""
        task_id = self.task_id
        parts = (self.tenant, self.user, "memory") if task_id is None else self._prefix()
        return ":".join(encode_key_part(p) for p in parts)

    def key(self, kind: str, *parts: str) -> str:
        """A key of the scope's space for ``kind`` (``context`` …; never ``task`` or
        ``memory``, which name the spaces), every element encoded with
        :func:`encode_key_part`: ``<tenant>:<user>:<kind>[:<part>…]`` in ``memory``
        (``Scope("acme", "a:b").key("context", "plan")`` -> ``acme:a%3Ab:context:plan``,
        SPEC.md MEM-CTX-2), ``<tenant>:<user>:task:<taskId>:<kind>[:<part>…]`` in a task
        space (the seed's key layout, memory-capabilities "Policy and recovery")."""
        return ":".join(encode_key_part(p) for p in (*self._prefix(), kind, *parts))

    def to_header(self) -> dict[str, str]:
        """The JSON value of the :data:`SCOPE_HEADER` header (``space`` only when it is not
        :data:`DEFAULT_SPACE`)."""
        header = {"tenant": self.tenant, "user": self.user}
        if self.space != DEFAULT_SPACE:
            header["space"] = self.space
        return header


def parse_scope(value: Any) -> Scope | None:
    """A :class:`Scope` from a header / config value (``None`` stays ``None``).

    Accepts a ``Scope`` or a mapping with the string keys ``tenant`` and ``user`` and
    optionally ``space`` (default :data:`DEFAULT_SPACE`), nothing else.

    Raises:
        MemoryError: ``PERMISSION_DENIED`` for anything else.
    """
    if value is None or isinstance(value, Scope):
        return value
    if not isinstance(value, Mapping) or not {"tenant", "user"} <= set(value) <= _SCOPE_KEYS:
        raise MemoryError(ErrorCode.PERMISSION_DENIED, "scope must be {tenant, user, space?}")
    return Scope(value["tenant"], value["user"], value.get("space", DEFAULT_SPACE))


def resolve_scope(bound: Scope | None, sent: Scope | None, required: bool) -> Scope | None:
    """The scope a call runs in: the one ``sent`` by the client, else the worker's
    ``bound`` one.

    A bound worker serves one tenant and user; the space is the caller's host's choice
    (``bound.space`` is the space of calls that send no scope).

    Raises:
        MemoryError: ``PERMISSION_DENIED`` when ``sent`` names another tenant or user than
            ``bound`` (a worker bound to one tenant never serves another), or when
            ``required`` and there is no scope at all.
    """
    if bound is not None and sent is not None and sent.owner != bound.owner:
        raise MemoryError(ErrorCode.PERMISSION_DENIED, "this worker serves another scope")
    scope = sent or bound
    if scope is None and required:
        message = missing_scope("this worker requires a scope")
        raise MemoryError(ErrorCode.PERMISSION_DENIED, message)
    return scope


def namespace_of(options: Any) -> str:
    """The namespace a plugin must confine a call to: ``options.scope.namespace``, or
    :data:`UNSCOPED` when the call has no scope (``options`` may be ``None``)."""
    scope = getattr(options, "scope", None)
    return UNSCOPED if scope is None else str(scope.namespace)
