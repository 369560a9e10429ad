"""Reading a store plugin's ``plugins.<name>`` section: the checks every plugin's
``create_store`` makes the same way (they were copied into the PostgreSQL, MySQL, Qdrant
and Milvus plugins).

A plugin merges its section over its defaults with :func:`plugin_values` (a secret key is
refused and named with the environment variable that holds it, MEM-CONF-5; an unknown key
is refused), then reads typed values with :func:`number_setting`, :func:`flag_setting` and
:func:`names_setting`. Values may be strings, as the environment gives them
(:mod:`ditto_worker.config.env`: numbers as numbers, ``true``/``false``/``1``/``0``/
``yes``/``no`` for booleans, ``a,b,c`` for lists). Every error is a
:class:`~ditto_worker.errors.ConfigError` naming ``plugins.<name>.<key>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ditto_worker.errors import ConfigError

__all__ = ["flag_setting", "names_setting", "number_setting", "plugin_values"]

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def plugin_values(
    plugin: str,
    given: Mapping[str, Any] | None,
    defaults: Mapping[str, Any],
    secrets: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``defaults`` updated with the section ``given``.

    Args:
        plugin: the plugin's name (``postgres``, ``mysql``, …), for messages.
        given: the ``plugins.<plugin>`` section (``None``: empty).
        defaults: every key the plugin accepts, with its default.
        secrets: keys that must not be in the file, each with the environment variable
            that holds it instead.

    Raises:
        ConfigError: a secret key (``plugins.<plugin>.<key> is not allowed: set <VAR>
            instead``) or an unknown key (``unknown <plugin> store settings: …``).
    """
    section = dict(given or {})
    for key, variable in (secrets or {}).items():
        if key in section:
            raise ConfigError(f"plugins.{plugin}.{key} is not allowed: set {variable} instead")
    unknown = sorted(set(section) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown {plugin} store settings: {', '.join(map(str, unknown))}")
    return {**defaults, **section}


def number_setting(values: Mapping[str, Any], plugin: str, name: str, low: float) -> float:
    """``values[name]`` as a float of at least ``low`` (a number, or its text).

    Raises:
        ConfigError: ``plugins.<plugin>.<name> must be a number >= <low>`` otherwise
            (``true``/``false`` are not numbers).
    """
    value = values[name]
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise ConfigError(f"plugins.{plugin}.{name} must be a number >= {low}")
    return float(value)


def flag_setting(values: Mapping[str, Any], plugin: str, name: str) -> bool:
    """``values[name]`` as a boolean: ``True``/``False``, or ``true``/``1``/``yes`` and
    ``false``/``0``/``no`` in any case.

    Raises:
        ConfigError: ``plugins.<plugin>.<name> must be true or false`` otherwise.
    """
    value = values[name]
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in (*_TRUE, *_FALSE):
        return value.lower() in _TRUE
    raise ConfigError(f"plugins.{plugin}.{name} must be true or false")


def names_setting(value: Any, plugin: str, name: str) -> list[str] | None:
    """A list of non-empty names from a list or ``a,b,c`` text; ``None`` for ``None`` or
    ``""`` (unset).

    Raises:
        ConfigError: ``plugins.<plugin>.<name> must be a list of names`` otherwise.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"plugins.{plugin}.{name} must be a list of names")
    return list(value)
