"""The shared reading of a store plugin's ``plugins.<name>`` section
(:mod:`ditto_worker.config.plugin_settings`), as the PostgreSQL, MySQL, Qdrant and Milvus
plugins use it."""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker.config.plugin_settings import (
    flag_setting,
    names_setting,
    number_setting,
    plugin_values,
)
from ditto_worker.errors import ConfigError

DEFAULTS = {"timeoutS": 5.0, "autoMigrate": True, "kinds": None}


def test_values_merge_over_the_defaults() -> None:
    assert plugin_values("mysql", None, DEFAULTS) == DEFAULTS
    merged = plugin_values("mysql", {"timeoutS": "2"}, DEFAULTS, {"url": "X_URL"})
    assert merged == {**DEFAULTS, "timeoutS": "2"}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"url": "mysql://u:secret@h/db"}, "plugins.mysql.url is not allowed: set X_URL instead"),
        ({"bogus": 1, "other": 2}, "unknown mysql store settings: bogus, other"),
    ],
)
def test_secret_and_unknown_keys_are_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        plugin_values("mysql", given, DEFAULTS, {"url": "X_URL"})
    assert str(info.value) == message and "secret" not in str(info.value)


@pytest.mark.parametrize(("raw", "expected"), [(3, 3.0), ("0.5", 0.5), (0.1, 0.1), ("1e1", 10.0)])
def test_numbers(raw: Any, expected: float) -> None:
    assert number_setting({"timeoutS": raw}, "qdrant", "timeoutS", 0.1) == expected


@pytest.mark.parametrize("raw", [True, "x", None, 0.05, "-1", [1]])
def test_bad_numbers_name_the_setting(raw: Any) -> None:
    with pytest.raises(ConfigError, match=r"plugins\.qdrant\.timeoutS must be a number >= 0\.1"):
        number_setting({"timeoutS": raw}, "qdrant", "timeoutS", 0.1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(True, True), (False, False), ("TRUE", True), ("yes", True), ("1", True), ("no", False),
     ("0", False), ("False", False)],
)  # fmt: skip
def test_flags(raw: Any, expected: bool) -> None:
    assert flag_setting({"autoMigrate": raw}, "postgres", "autoMigrate") is expected


@pytest.mark.parametrize("raw", [1, 0, "maybe", None, ""])
def test_bad_flags_name_the_setting(raw: Any) -> None:
    with pytest.raises(ConfigError, match=r"plugins\.postgres\.autoMigrate must be true or false"):
        flag_setting({"autoMigrate": raw}, "postgres", "autoMigrate")


def test_names() -> None:
    assert names_setting(None, "milvus", "embedKinds") is None
    assert names_setting("", "milvus", "embedKinds") is None
    assert names_setting(" preference , note,", "milvus", "embedKinds") == ["preference", "note"]
    assert names_setting(["a", "b"], "milvus", "embedKinds") == ["a", "b"]
    for bad in (["a", ""], [1], {"a": 1}, 3):
        with pytest.raises(ConfigError, match=r"plugins\.milvus\.embedKinds must be a list"):
            names_setting(bad, "milvus", "embedKinds")
