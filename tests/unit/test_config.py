"""Config: ${VAR} expansion, owned-section strictness, env overrides (MEM-PY-7, MEM-CONF)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ditto_worker.cli.commands import resolve_nodes
from ditto_worker.config import load_runtime_config, load_runtime_config_file
from ditto_worker.errors import ConfigError
from ditto_worker.runtime.registry import store_single_writer

REPO = Path(__file__).resolve().parents[2]


def test_reference_ditto_yaml_loads_with_defaults() -> None:
    config = load_runtime_config_file(REPO / "ditto.yaml", env={})
    assert config.fleet.broker_url == ""
    assert config.fleet.in_process
    assert config.memory_worker.query_limit == 100  # MEM-CONF-1
    assert config.memory_worker.search_limit == 10
    assert config.plugin_settings("sqlite") == {
        "path": ".ditto/memory.sqlite",
        "busyTimeoutMs": "5000",
        "embedding": "none",  # MEM-SEARCH-6: no embedding unless configured
        "hybrid": {},
        "executionRetentionS": 86400,
        "operationRetentionS": 2592000,
        "indexFields": [],
        "queryFields": [],
    }  # MEM-PY-8
    assert set(config.memory_worker.groups) == {"reads", "writes", "search"}


def test_var_expansion_with_and_without_default() -> None:
    data = {"fleet": {"brokerUrl": "${B}", "resultBackend": "${R:-redis://x:1/2}"}}
    config = load_runtime_config(data, env={"B": "redis://h:6379/0"})
    assert config.fleet.broker_url == "redis://h:6379/0"
    assert config.fleet.result_backend == "redis://x:1/2"


def test_unset_var_without_default_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="NOPE"):
        load_runtime_config({"fleet": {"brokerUrl": "${NOPE}"}}, env={})


def test_env_overrides_yaml_broker() -> None:  # MEM-PY-7
    config = load_runtime_config(
        {"fleet": {"brokerUrl": "redis://yaml:1/0"}}, env={"DITTO_BROKER_URL": "redis://env:2/0"}
    )
    assert config.fleet.broker_url == "redis://env:2/0"
    assert not config.fleet.in_process


def test_unknown_key_in_owned_section_fails() -> None:  # MEM-PY-7
    with pytest.raises(ConfigError, match="queryLimt"):
        load_runtime_config({"workers": {"memory": {"queryLimt": 5}}}, env={})
    with pytest.raises(ConfigError):
        load_runtime_config({"fleet": {"brokerURL": "x"}}, env={})


def test_other_workers_sections_are_left_alone() -> None:  # MEM-PY-7
    config = load_runtime_config(
        {"workers": {"translate": {"model": "x", "anything": 1}}, "context": {"k": 1}}, env={}
    )
    assert config.memory_worker.query_limit == 100


def test_yaml_limits_are_validated() -> None:  # MEM-ERR-1 applied to config
    with pytest.raises(ConfigError):
        load_runtime_config({"workers": {"memory": {"queryLimit": 0}}}, env={})
    config = load_runtime_config({"workers": {"memory": {"queryLimit": "${Q:-7}"}}}, env={})
    assert config.memory.query_limit == 7  # the seed's config.memory


def test_group_with_unknown_node_fails() -> None:
    with pytest.raises(ConfigError, match="MEMORY.NOPE"):
        load_runtime_config(
            {
                "workers": {
                    "memory": {"groups": {"g": {"nodes": ["MEMORY.NOPE"], "concurrency": 1}}}
                }
            },
            env={},
        )


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_runtime_config_file(tmp_path / "nope.yaml", env={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_runtime_config_file(bad, env={})


def _picked(config: Any, nodes: str | None) -> tuple[list[str], int, str]:
    selection = resolve_nodes(config, nodes)
    return selection.nodes, selection.concurrency, selection.pool


def test_resolve_nodes_groups_ids_and_concurrency() -> None:
    config = load_runtime_config(None, env={})
    assert _picked(config, None) == (
        [
            "MEMORY.GET",
            "MEMORY.QUERY",
            "MEMORY.SEARCH",
            "MEMORY.WRITE",
            "MEMORY.UPDATE",
            "MEMORY.DELETE",
        ],
        4,
        "prefork",
    )
    # the default store is SQLite, one writer at a time: its mutations run on one thread
    assert _picked(config, "writes") == (
        ["MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"],
        1,
        "threads",
    )
    assert _picked(config, "MEMORY.GET,search") == (["MEMORY.GET", "MEMORY.SEARCH"], 4, "prefork")
    # any worker kind by name, with its own section's pool and concurrency (MEM-RT-1)
    assert _picked(config, "retrieval") == (["RETRIEVAL.SEARCH", "RETRIEVAL.EMBED"], 32, "threads")
    assert _picked(config, "context") == (["CONTEXT.UPDATE", "CONTEXT.LOAD"], 8, "threads")
    # one call per model-server slot: the local server has one (issue 16)
    assert _picked(config, "infer") == (["INFER.GENERATE"], 1, "threads")
    with pytest.raises(ConfigError):
        resolve_nodes(config, "bogus")


def test_mutations_on_a_single_writer_store_run_on_one_thread() -> None:
    # issue 28 item 4: SQLite takes one writer at a time; a prefork pool process only adds
    # the hand-over of each batch. Stores with concurrent writers keep the group's pool.
    config = load_runtime_config(None, env={})
    assert store_single_writer(config) and store_single_writer(config, "sqlite")
    assert not any(store_single_writer(config, n) for n in ("postgres", "memory", "nope"))
    writes = ["MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"]

    def pick(nodes: str, **kwargs: Any) -> tuple[str, int]:
        selection = resolve_nodes(config, nodes, **kwargs)
        return selection.pool, selection.concurrency

    assert resolve_nodes(config, "writes").nodes == writes
    assert pick("writes") == pick("MEMORY.WRITE") == pick("MEMORY.DELETE") == ("threads", 1)
    assert pick("writes", store="postgres") == ("prefork", 2)
    assert pick("writes", pool="prefork") == ("prefork", 2)  # --pool wins, with the group's -c
    assert pick("MEMORY.GET,MEMORY.WRITE") == ("prefork", 4)  # reads too: the kind's pool
    assert pick("reads") == ("prefork", 4)
    chosen = load_runtime_config(
        {"workers": {"memory": {"groups": {
            "writes": {"nodes": writes, "concurrency": 3, "pool": "prefork"}}}}},
        env={},
    )  # fmt: skip
    selection = resolve_nodes(chosen, "writes")
    assert (selection.pool, selection.concurrency) == ("prefork", 3)  # the group's own pool
