"""Embedding providers and client transports are found by entry point (issue 24 item 3).

``tests/fixtures/house_kit`` is a third party's distribution, put on ``sys.path`` only
here: its ``fixed`` embedder and ``loopback`` transport are reached exactly as this
package's own ``local``/``http`` and ``celery`` are, so neither the store plugins nor
the runtime name :mod:`ditto_worker.retrieval` or :mod:`ditto_worker.fleet`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import create_ditto, create_memory_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.errors import ConfigError
from ditto_worker.runtime.registry import (
    EMBEDDER_GROUP,
    TRANSPORT_GROUP,
    build_embedder,
    entry_points,
)
from ditto_worker.testing import InMemoryMemoryStore

KIT = Path(__file__).resolve().parents[1] / "fixtures" / "house_kit"


@pytest.fixture
def kit(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(KIT))
    importlib.invalidate_caches()
    return importlib.import_module("ditto_house_kit")


def test_this_package_installs_its_embedders_and_transport_as_entry_points() -> None:
    embedders = {ep.name: ep.value for ep in entry_points(group=EMBEDDER_GROUP)}
    transports = {ep.name: ep.value for ep in entry_points(group=TRANSPORT_GROUP)}
    assert embedders["local"] == "ditto_worker.retrieval.embed:local_provider"
    assert embedders["http"] == "ditto_worker.retrieval.http:http_provider"
    assert transports["celery"] == "ditto_worker.fleet.client:connect"


def test_none_builds_no_embedder() -> None:
    assert [build_embedder(kind) for kind in (None, "", "none")] == [None, None, None]


def test_an_unknown_embedder_names_the_installed_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown embedding provider 'nope'.*http, local"):
        build_embedder("nope")


def test_the_http_embedder_is_built_from_the_environment_only() -> None:
    env = {
        "DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1",
        "DITTO_WORKER_RETRIEVAL_EMBEDDING_MODEL": "m",
        "DITTO_WORKER_RETRIEVAL_EMBEDDING_DIMENSIONS": "4",
    }
    provider = build_embedder("http", None, env)
    assert provider is not None and provider.identity.dims == 4  # no request sent yet
    with pytest.raises(ConfigError, match="environment only"):
        build_embedder("http", {"model": "m"}, env)


@pytest.mark.parametrize(
    "plugin", ["ditto_plugin_sqlite", "ditto_plugin_qdrant", "ditto_plugin_milvus"]
)
def test_a_store_plugin_reaches_a_third_party_embedder_by_its_name(
    kit: Any, plugin: str, tmp_path: Path
) -> None:
    create_store = importlib.import_module(plugin).create_store
    where = {"uri": str(tmp_path / "m.db")} if "milvus" in plugin else {"path": str(tmp_path / "s")}
    store = create_store({**where, "embedding": "fixed"}, {})
    try:
        assert isinstance(store._embedder, kit.FixedEmbedder)
    finally:
        store.close()


def test_the_runtime_connects_through_the_transport_the_config_names(kit: Any) -> None:
    config = load_runtime_config(
        None, env={"DITTO_BROKER_URL": "redis://127.0.0.1:1/0", "DITTO_TRANSPORT": "loopback"}
    )
    runtime = create_ditto([create_memory_worker(InMemoryMemoryStore())], config,
                           scope={"tenant": "t", "user": "u"})  # fmt: skip
    assert runtime.embedded is False
    result = runtime.invoke("MEMORY.GET", {"ids": ["a"]})
    assert result.output == {
        "via": "loopback", "node": "MEMORY.GET", "input": {"ids": ["a"]},
        "scope": {"tenant": "t", "user": "u"},
    }  # fmt: skip
    runtime.close()


def test_an_unknown_transport_names_the_installed_ones() -> None:
    config = load_runtime_config(
        None, env={"DITTO_BROKER_URL": "redis://127.0.0.1:1/0", "DITTO_TRANSPORT": "carrier-pigeon"}
    )
    with pytest.raises(ConfigError, match=r"unknown transport 'carrier-pigeon'.*celery"):
        create_ditto([create_memory_worker(InMemoryMemoryStore())], config)
