"""One environment rule for every ``ditto.yaml`` key (issue 14 item 6; MEM-PY-7).

A key's variable is its path in upper snake case, with one prefix per section:

* ``fleet.<key>`` → ``DITTO_<KEY>`` (``fleet.callTimeoutS`` → ``DITTO_CALL_TIMEOUT_S``);
* ``graph.<key>`` → ``DITTO_GRAPH_<KEY>`` (``graph.loopBudget`` → ``DITTO_GRAPH_LOOP_BUDGET``);
* ``workers.<kind>.<key>…`` → ``DITTO_WORKER_<KIND>_<KEY>…`` (``workers.memory.searchTarget``
  → ``DITTO_WORKER_MEMORY_SEARCH_TARGET``);
* ``plugins.<name>.<key>…`` → ``DITTO_WORKER_MEMORY_<NAME>_<KEY>…`` (the seed's plugin rule:
  ``plugins.sqlite.path`` → ``DITTO_WORKER_MEMORY_SQLITE_PATH``),

so the names the project already used (``DITTO_BROKER_URL``, ``DITTO_RESULT_BACKEND``,
``DITTO_WORKER_CONTEXT_REDIS_URL``, ``DITTO_WORKER_INFER_BASE_URL``,
``DITTO_WORKER_MEMORY_SQLITE_PATH`` …) are this rule's. Nested keys continue the path
(``workers.retrieval.targets.memories.store`` →
``DITTO_WORKER_RETRIEVAL_TARGETS_MEMORIES_STORE``).

Which keys: every key of the built-in defaults of the sections this project owns, and every
key the file itself has under ``fleet``, ``graph``, ``workers`` and ``plugins`` (so a
target, group or plugin section named in the file can be changed per machine; one that
exists only in the environment cannot be made up). A set, non-empty variable wins over the
file (after ``${VAR}`` expansion); an empty one is ignored. The value is read as the key's
type: text as is, numbers as numbers, ``true``/``false``/``1``/``0``/``yes``/``no`` for
booleans, a list as ``a,b,c`` or YAML flow ``[a, b]``; a key whose default is ``null`` takes
YAML (``{tenant: t1, user: u1}``). Mappings are not set whole: set their keys. Secrets that
``ditto.yaml`` must not hold (``DITTO_WORKER_INFER_API_KEY``, the plugins' URLs) are read by
their owners and are not keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ditto_worker.errors import ConfigError

__all__ = ["OWNED_SECTIONS", "apply_env", "env_name", "env_keys"]

OWNED_SECTIONS = ("fleet", "graph", "workers", "plugins")
"""Top-level sections of ``ditto.yaml`` this project reads."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _snake(key: str) -> str:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return re.sub(r"[^A-Za-z0-9]+", "_", spaced).strip("_").upper()


def env_name(path: tuple[str, ...]) -> str:
    """The variable of the key at ``path`` (``("fleet", "callTimeoutS")`` ->
    ``DITTO_CALL_TIMEOUT_S``); see the module docstring."""
    section, rest = path[0], [_snake(p) for p in path[1:]]
    if section == "fleet":
        parts = rest
    elif section == "workers":
        parts = ["WORKER", *rest]
    elif section == "plugins":
        parts = ["WORKER", "MEMORY", *rest]
    else:
        parts = [_snake(section), *rest]
    return "_".join(["DITTO", *parts])


def _leaves(
    tree: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in tree.items():
        here = (*path, str(key))
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, here)
        elif not isinstance(value, Mapping):
            yield here, value


def _merged(defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in given.items():
        base = out.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            out[key] = _merged(base, value)
        else:
            out[key] = value
    return out


def env_keys(defaults: Mapping[str, Any], data: Mapping[str, Any]) -> dict[tuple[str, ...], Any]:
    """Path -> current value of every key the environment can set (module docstring)."""
    owned = {k: v for k, v in data.items() if k in OWNED_SECTIONS and isinstance(v, Mapping)}
    return dict(_leaves(_merged(defaults, owned), ()))


def _typed(raw: str, like: Any, name: str) -> Any:
    text = raw.strip()
    if isinstance(like, bool):
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise ConfigError(f"env {name}: expected true or false")
    if isinstance(like, int | float):
        try:
            return (
                int(text)
                if isinstance(like, int) and re.fullmatch(r"[+-]?\d+", text)
                else float(text)
            )
        except ValueError:
            raise ConfigError(f"env {name}: expected a number") from None
    if isinstance(like, list):
        if text.startswith("["):
            return _yaml(text, name)
        return [item.strip() for item in text.split(",") if item.strip()]
    if like is None:
        return _yaml(text, name)
    return raw


def _yaml(text: str, name: str) -> Any:
    import yaml  # only when a variable holds YAML: importing the SDK loads no YAML parser

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"env {name}: not valid YAML") from None


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {} if child is None else dict(child) if isinstance(child, Mapping) else {}
            node[part] = child
        node = child
    node[path[-1]] = value


def apply_env(
    data: Mapping[str, Any], defaults: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``data`` (a parsed, expanded ``ditto.yaml``) with every key's variable applied.

    Args:
        data: the file's mapping (not changed).
        defaults: the built-in defaults of the owned sections, wire names.
        env: the environment.

    Returns:
        ``(new data, {dotted key: variable})`` for the keys the environment set.

    Raises:
        ConfigError: a variable that cannot be read as its key's type (names the variable,
            never shows the value).
    """
    out = _deep_copy(data)
    applied: dict[str, str] = {}
    for path, current in env_keys(defaults, data).items():
        name = env_name(path)
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        _set(out, path, _typed(raw, current, name))
        applied[".".join(path)] = name
    return out, applied


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
