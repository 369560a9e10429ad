"""Print the table of every ``ditto.yaml`` key: its environment variable, its
default and what it means (issue 14 item 6: one env rule, one table).

Usage: ``python scripts/config_table.py`` (from the repo root). The owned sections come from
the config models (their defaults and field descriptions), the plugin sections from the
reference ``ditto.yaml`` (their defaults as written; their meaning is in its comments).
``tests/unit/test_config_env.py`` keeps the table of ``docs/configuration.md`` equal to this
output (between its ``config-table`` markers).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ditto_worker.config import (  # noqa: E402
    FleetSettings,
    GraphSettings,
    MemoryWorkerSettings,
    RetrievalWorkerSettings,
)
from ditto_worker.config.context import ContextWorkerSettings  # noqa: E402
from ditto_worker.config.env import env_name  # noqa: E402
from ditto_worker.config.infer import InferSettings  # noqa: E402

_VAR = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-([^}]*))?\}")


def _shown(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True)
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    text = text if text != "" else '""'
    return f"`{text}`" if len(text) <= 60 else "see ditto.yaml"


def _env(path: tuple[str, ...]) -> str:
    """env_name, with ``<name>`` segments (any entry of a mapping) kept as ``<NAME>``."""
    return env_name(tuple("namexplaceholder" if p == "<name>" else p for p in path)).replace(
        "NAMEXPLACEHOLDER", "<NAME>"
    )


def _model_rows(
    model: type[BaseModel], path: tuple[str, ...], instance: BaseModel | None = None
) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    instance = model() if instance is None else instance
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        here = (*path, field.alias or name)
        value = getattr(instance, name)
        meaning = " ".join((field.description or "").split()).replace("|", "\\|")
        if isinstance(value, BaseModel):
            rows += _model_rows(type(value), here, value)
        elif (
            isinstance(value, dict)
            and value
            and all(isinstance(v, BaseModel) for v in value.values())
        ):  # named entries (groups, targets): their keys, any name
            rows.append((".".join(here), "(keys below)", _shown(sorted(value)), meaning))
            entry = next(iter(value.values()))
            for sub in _model_rows(type(entry), (*here, "<name>"), entry):
                rows.append((sub[0], sub[1], "see ditto.yaml", sub[3]))
        elif isinstance(value, dict):  # a mapping: set its keys, not the whole
            rows.append((".".join(here), _env(here) + "_<KEY>", _shown(value), meaning))
        else:
            rows.append((".".join(here), _env(here), _shown(value), meaning))
    return rows


def _plugin_rows() -> list[tuple[str, ...]]:
    text = (REPO / "ditto.yaml").read_text()
    plugins = yaml.safe_load(text).get("plugins") or {}
    rows = []
    for plugin, settings in plugins.items():
        for key, value in (settings or {}).items():
            if isinstance(value, str):
                match = _VAR.fullmatch(value)
                value = match.group(1) if match and match.group(1) is not None else value
            path = ("plugins", plugin, key)
            env = env_name(path) + ("_<KEY>" if isinstance(value, dict) else "")
            rows.append((".".join(path), env, _shown(value), "see ditto.yaml"))
    return rows


def table() -> str:
    """The markdown table: key | env | default | meaning."""
    rows = _model_rows(FleetSettings, ("fleet",)) + _model_rows(GraphSettings, ("graph",))
    for kind, model in [("memory", MemoryWorkerSettings), ("retrieval", RetrievalWorkerSettings),
                        ("context", ContextWorkerSettings), ("infer", InferSettings)]:  # fmt: skip
        rows += _model_rows(model, ("workers", kind))
    rows += _plugin_rows()
    lines = ["| key | env | default | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{k}` | {e if e.startswith('(') else f'`{e}`'} | {d} | {m} |"
              for k, e, d, m in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
