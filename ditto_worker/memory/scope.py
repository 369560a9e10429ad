"""Tenant scope, as the SDK has always exported it: :mod:`ditto_worker.scope` re-exported.

``Scope`` lives below the runtime and the SDK (``ditto_worker/scope.py``, beside the
contracts and errors) so both reach it downward; ``from ditto_worker.memory.scope import
Scope`` keeps working and names the same objects.
"""

from __future__ import annotations

from ditto_worker.scope import (
    DEFAULT_SPACE,
    MAX_SCOPE_PART,
    SCOPE_HEADER,
    SCOPE_HOWTO,
    TASK_SPACE_PREFIX,
    UNSCOPED,
    Scope,
    encode_key_part,
    missing_scope,
    namespace_of,
    parse_scope,
    resolve_scope,
)

__all__ = [
    "DEFAULT_SPACE",
    "MAX_SCOPE_PART",
    "SCOPE_HEADER",
    "SCOPE_HOWTO",
    "TASK_SPACE_PREFIX",
    "UNSCOPED",
    "Scope",
    "encode_key_part",
    "missing_scope",
    "namespace_of",
    "parse_scope",
    "resolve_scope",
]
