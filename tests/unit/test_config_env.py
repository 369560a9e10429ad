"""One environment rule for every ditto.yaml key; near-miss sections (issue 14 items 3, 6)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from ditto_worker.config import defaults_tree, load_runtime_config, load_runtime_config_file
from ditto_worker.config.env import apply_env, env_keys, env_name
from ditto_worker.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (("fleet", "brokerUrl"), "DITTO_BROKER_URL"),
        (("fleet", "resultBackend"), "DITTO_RESULT_BACKEND"),
        (("fleet", "callTimeoutS"), "DITTO_CALL_TIMEOUT_S"),
        (("graph", "loopBudget"), "DITTO_GRAPH_LOOP_BUDGET"),
        (("workers", "memory", "searchTarget"), "DITTO_WORKER_MEMORY_SEARCH_TARGET"),
        (("workers", "context", "redisUrl"), "DITTO_WORKER_CONTEXT_REDIS_URL"),
        (("workers", "infer", "baseUrl"), "DITTO_WORKER_INFER_BASE_URL"),
        (("workers", "retrieval", "targets", "memories", "store"),
         "DITTO_WORKER_RETRIEVAL_TARGETS_MEMORIES_STORE"),
        (("plugins", "sqlite", "path"), "DITTO_WORKER_MEMORY_SQLITE_PATH"),
        (("plugins", "sqlite", "busyTimeoutMs"), "DITTO_WORKER_MEMORY_SQLITE_BUSY_TIMEOUT_MS"),
    ],
)  # fmt: skip
def test_the_rule_gives_the_names_already_in_use(path: tuple[str, ...], name: str) -> None:
    assert env_name(path) == name


def test_every_default_key_has_a_distinct_variable() -> None:
    keys = env_keys(defaults_tree(), {})
    names = [env_name(p) for p in keys]
    assert len(names) == len(set(names)) > 50
    assert ("workers", "memory", "store") in keys and ("fleet", "logFormat") in keys
    assert ("workers", "infer", "apiKey") not in keys  # a secret: env only, never a key


def test_env_sets_typed_values_and_wins_over_the_file() -> None:
    data = {"fleet": {"callTimeoutS": 5}, "plugins": {"sqlite": {"path": "a.sqlite"}},
            "workers": {"retrieval": {"targets": {"notes": {"store": "sqlite"}}}}}  # fmt: skip
    env = {
        "DITTO_CALL_TIMEOUT_S": "12.5",
        "DITTO_LOG_CONTENT": "yes",
        "DITTO_WORKER_MEMORY_SEARCH_TARGET": "memories",
        "DITTO_WORKER_MEMORY_GROUPS_READS_NODES": "MEMORY.GET, MEMORY.QUERY",
        "DITTO_WORKER_MEMORY_SCOPE": "{tenant: t1, user: u1}",
        "DITTO_WORKER_RETRIEVAL_TARGETS_NOTES_STORE": "postgres",
        "DITTO_WORKER_RETRIEVAL_TARGETS_MADEUP_STORE": "qdrant",  # no such target: ignored
        "DITTO_WORKER_MEMORY_SQLITE_PATH": "/srv/ditto/memory.sqlite",
        "DITTO_MAX_INPUT_BYTES": "",  # empty: ignored
    }
    out, applied = apply_env(data, defaults_tree(), env)
    assert out["fleet"]["callTimeoutS"] == 12.5 and out["fleet"]["logContent"] is True
    assert out["workers"]["memory"]["searchTarget"] == "memories"
    assert out["workers"]["memory"]["groups"]["reads"]["nodes"] == ["MEMORY.GET", "MEMORY.QUERY"]
    assert out["workers"]["memory"]["scope"] == {"tenant": "t1", "user": "u1"}
    assert out["workers"]["retrieval"]["targets"]["notes"]["store"] == "postgres"
    assert "madeup" not in out["workers"]["retrieval"]["targets"]
    assert out["plugins"]["sqlite"]["path"] == "/srv/ditto/memory.sqlite"
    assert "maxInputBytes" not in out["fleet"]
    assert data["fleet"] == {"callTimeoutS": 5}  # the input is not changed
    assert applied["workers.memory.searchTarget"] == "DITTO_WORKER_MEMORY_SEARCH_TARGET"


def test_a_whole_config_from_env() -> None:
    config = load_runtime_config(None, env={
        "DITTO_BROKER_URL": "redis://127.0.0.1:6379/0",
        "DITTO_WORKER_MEMORY_STORE": "postgres",
        "DITTO_WORKER_MEMORY_SEARCH_TARGET": "memories",
        "DITTO_WORKER_RETRIEVAL_TARGETS_MEMORIES_STORE": "postgres",
        "DITTO_WORKER_RETRIEVAL_POOL": "prefork",
        "DITTO_LOG_FORMAT": "json",
        "DITTO_TIME_LIMIT_MARGIN_S": "0",
    })  # fmt: skip
    assert config.memory_worker.store == "postgres"
    assert config.memory_worker.search_target == "memories"
    assert config.retrieval_worker.targets["memories"].store == "postgres"
    assert config.retrieval_worker.pool == "prefork"
    assert config.fleet.log_format == "json" and config.fleet.time_limit_margin_s == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [("DITTO_CALL_TIMEOUT_S", "soon"), ("DITTO_LOG_CONTENT", "maybe"),
     ("DITTO_WORKER_MEMORY_SCOPE", "{tenant: [")],
)  # fmt: skip
def test_a_value_of_the_wrong_type_names_the_variable_not_the_value(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_runtime_config(None, env={name: value})
    assert name in str(caught.value) and value not in str(caught.value)


@pytest.mark.parametrize(
    ("data", "meant"),
    [({"fleeet": {"brokerUrl": "redis://h:6379/0"}}, "'fleet'"),
     ({"Fleet": {}}, "'fleet'"),
     ({"plugin": {}}, "'plugins'"),
     ({"workers": {"memroy": {"store": "sqlite"}}}, "workers.memory"),
     ({"workers": {"retreival": {}}}, "workers.retrieval")],
)  # fmt: skip
def test_a_near_miss_of_an_owned_section_is_an_error(data: dict[str, object], meant: str) -> None:
    with pytest.raises(ConfigError, match="did you mean") as caught:
        load_runtime_config(data, env={})
    assert meant in str(caught.value)


def test_other_sections_are_left_alone_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ditto_worker.config")
    config = load_runtime_config(
        {"llm": {"model": "x"}, "workers": {"echo": {"factory": "m:f", "pool": "threads"},
                                             "memori": {"factory": "m:g"}}},
        env={},
    )  # fmt: skip
    assert config.worker_sections["echo"]["pool"] == "threads"
    assert [r.getMessage() for r in caplog.records] == [
        "ditto.yaml: section 'llm' is not ditto-worker's; left alone"
    ]


def test_the_reference_file_loads_and_the_docs_table_is_current() -> None:
    load_runtime_config_file(REPO / "ditto.yaml", env={})
    spec = importlib.util.spec_from_file_location(
        "config_table", REPO / "scripts" / "config_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (REPO / "docs" / "configuration.md").read_text()
    start = page.index("<!-- config-table:start -->\n") + len("<!-- config-table:start -->\n")
    end = page.index("<!-- config-table:end -->")
    assert page[start:end] == module.table(), "run: python scripts/config_table.py"
