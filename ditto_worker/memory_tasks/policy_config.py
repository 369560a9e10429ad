"""The admission policy as configuration: ``ditto.yaml`` ``tasks.policy`` and ``policy=``.

The memory-capabilities seed: "Expand the application policy deliberately for other
domains." The default (:data:`~ditto_worker.memory_tasks.policy.DEFAULT_POLICY`) stays as
strict as before; an application widens it in ``ditto.yaml`` or passes ``policy=`` to a
``run_*`` entry (issue 35 item 4)::

    tasks:
      policy:
        extend: true            # add to the default table (false: replace it)
        fields:                 # {field: {value: [grounding words]}}
          signoff:
            initials: [initials, Initialen, 缩写]
        notDurable: [this sprint, diesen Sprint]   # phrases: reason not_durable_policy
        secrets:                # {kind: regular expression}: reason secret
          ticket_token: "TKT-[0-9]{8}"

Everything is validated when it is loaded (:func:`policy_from_config`), before a task
starts: an unknown key, an empty field, value or word list, a regular expression that
does not compile — :class:`~ditto_worker.memory_tasks.policy.PolicyError` naming the key.
The other admission rules (verbatim user quote, grounding, negation, one-off,
hypothetical, question, musing, built-in secret shapes) always apply.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ditto_worker.memory_tasks.phrases import phrase_pattern
from ditto_worker.memory_tasks.policy import DEFAULT_POLICY, PolicyError, PreferencePolicy

__all__ = ["PolicyRules", "load_task_policy", "policy_from_config", "resolve_policy"]

_KEYS = frozenset({"extend", "fields", "notDurable", "secrets"})


@dataclass(frozen=True)
class PolicyRules:
    """Checks an application adds to :func:`~ditto_worker.memory_tasks.policy.admit`.

    Attributes:
        not_durable: phrases that make a sentence not durable (``not_durable_policy``).
        secrets: ``{kind: compiled pattern}``; a match in the quote is ``secret``.
    """

    not_durable: re.Pattern[str] | None = None
    secrets: Mapping[str, re.Pattern[str]] | None = None

    def reasons(self, quote: str, contexts: Sequence[str]) -> list[str]:
        """Reason codes for ``quote`` and the user sentences it lies in."""
        found: list[str] = []
        if self.not_durable is not None and any(self.not_durable.search(c) for c in contexts):
            found.append("not_durable_policy")
        if self.secrets and any(p.search(quote) for p in self.secrets.values()):
            found.append("secret")
        return found


def _words(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise PolicyError(f"{where}: must be a non-empty list of phrases")
    if not all(isinstance(w, str) and w.strip() for w in value):
        raise PolicyError(f"{where}: every phrase must be non-empty text")
    return tuple(value)


def _fields(data: Any) -> dict[str, dict[str, tuple[str, ...]]]:
    if not isinstance(data, Mapping) or not data:
        raise PolicyError("tasks.policy.fields: must map fields to {value: [words]}")
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for name, values in data.items():
        where = f"tasks.policy.fields.{name}"
        if not isinstance(name, str) or not name.strip():
            raise PolicyError("tasks.policy.fields: a field name must be non-empty text")
        if not isinstance(values, Mapping) or not values:
            raise PolicyError(f"{where}: must map values to grounding words")
        out[name] = {str(v): _words(f"{where}.{v}", w) for v, w in values.items()}
    return out


def _secrets(data: Any) -> dict[str, re.Pattern[str]]:
    if not isinstance(data, Mapping):
        raise PolicyError("tasks.policy.secrets: must map kinds to regular expressions")
    compiled: dict[str, re.Pattern[str]] = {}
    for kind, pattern in data.items():
        if not isinstance(pattern, str) or not pattern:
            raise PolicyError(f"tasks.policy.secrets.{kind}: must be a regular expression")
        try:
            compiled[str(kind)] = re.compile(pattern)
        except re.error as exc:
            raise PolicyError(f"tasks.policy.secrets.{kind}: {exc.msg}") from None
    return compiled


def policy_from_config(data: Mapping[str, Any] | None) -> PreferencePolicy:
    """A :class:`~ditto_worker.memory_tasks.policy.PreferencePolicy` from ``tasks.policy``.

    Args:
        data: the section (see the module docstring); ``None`` or ``{}``: the default.

    Raises:
        PolicyError: naming the key that is wrong.
    """
    if not data:
        return DEFAULT_POLICY
    if not isinstance(data, Mapping):
        raise PolicyError("tasks.policy: must be a mapping")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise PolicyError(f"tasks.policy: unknown key {unknown[0][:40]!r}; "
                          f"known: {', '.join(sorted(_KEYS))}")  # fmt: skip
    extend = data.get("extend", True)
    if not isinstance(extend, bool):
        raise PolicyError("tasks.policy.extend: must be true or false")
    fields: dict[str, Any] = dict(DEFAULT_POLICY.fields) if extend else {}
    if "fields" in data:
        fields.update(_fields(data["fields"]))
    phrases = data.get("notDurable")
    rules = PolicyRules(
        not_durable=None
        if phrases is None
        else phrase_pattern(_words("tasks.policy.notDurable", phrases)),
        secrets=_secrets(data["secrets"]) if "secrets" in data else None,
    )
    return PreferencePolicy(fields, rules=rules)


def resolve_policy(policy: PreferencePolicy | Mapping[str, Any] | None) -> PreferencePolicy:
    """``policy=`` of a ``run_*`` entry: a policy as is, a ``tasks.policy`` mapping
    validated (:func:`policy_from_config`), ``None`` the default.

    Raises:
        PolicyError: an invalid mapping.
    """
    if policy is None:
        return DEFAULT_POLICY
    if isinstance(policy, PreferencePolicy):
        return policy
    return policy_from_config(policy)


def load_task_policy(path: str | os.PathLike[str] | None = None) -> PreferencePolicy:
    """``tasks.policy`` of ``path`` (else ``./ditto.yaml`` when present), validated.

    Raises:
        PolicyError: the section is invalid.
        ConfigError: the file cannot be read or is not YAML.
    """
    import yaml

    from ditto_worker.errors import ConfigError

    file = Path(path) if path is not None else Path("ditto.yaml")
    if path is None and not file.is_file():
        return DEFAULT_POLICY
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {file} as YAML ({type(exc).__name__})") from None
    tasks = (raw.get("tasks") if isinstance(raw, Mapping) else None) or {}
    if not isinstance(tasks, Mapping):
        raise PolicyError("tasks: must be a mapping")
    return policy_from_config(tasks.get("policy"))
