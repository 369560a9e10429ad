"""Defaults (MEM-CONF), node descriptors and the worker definition (MEM-NODE, MEM-PY-1),
and the accuracy of ``ditto_worker.__all__``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import ditto_worker
from ditto_worker import (
    ConfigError,
    MemoryDefaults,
    MemoryResources,
    MemoryWorker,
    NodeContext,
    NodeResult,
    create_memory,
    create_memory_worker,
    memory_delete_node,
    memory_get_node,
    memory_query_node,
    memory_search_node,
    memory_update_node,
    memory_write_node,
    to_wire,
)
from ditto_worker.contracts import NODE_IDS
from tests.unit._spies import SearchSpy as Spy
from tests.unit._spies import code, err

# --- MEM-CONF -------------------------------------------------------------------------


def test_builtin_limits() -> None:
    # MEM-CONF-1: built-in QUERY 100, SEARCH 10; the plugin receives the resolved limit
    spy = Spy()
    memory = create_memory(spy)
    memory.query({})
    memory.search({"query": "q"})
    assert spy.limits() == [100, 10]


@pytest.mark.parametrize(
    ("request_limit", "factory", "runtime", "expected"),
    [
        (7, {"queryLimit": 20, "searchLimit": 20}, {"queryLimit": 30, "searchLimit": 30}, 7),
        (None, {"queryLimit": 20, "searchLimit": 20}, {"queryLimit": 30, "searchLimit": 30}, 20),
        (None, None, {"queryLimit": 30, "searchLimit": 30}, 30),
        (None, {"query_limit": 20, "search_limit": 20}, None, 20),  # snake_case accepted
        (None, {}, MemoryDefaults(query_limit=30, search_limit=30), 30),
    ],
)
def test_limit_precedence(request_limit: Any, factory: Any, runtime: Any, expected: int) -> None:
    # MEM-CONF-2: request limit > factory defaults > runtime YAML (execute's arg) > built-in
    spy = Spy()
    memory = create_memory(spy, defaults=factory)
    extra = {} if request_limit is None else {"limit": request_limit}
    memory.execute("MEMORY.QUERY", extra, runtime)
    memory.execute("MEMORY.SEARCH", {"query": "q", **extra}, runtime)
    assert spy.limits() == [expected, expected]


def test_factory_defaults_are_not_caps() -> None:
    # MEM-CONF-3: a request may go above the factory default, up to 10000
    spy = Spy()
    result = create_memory(spy, defaults={"queryLimit": 5}).query({"limit": 500})
    assert result.status == "success" and spy.limits() == [500]


def test_defaults_are_a_snapshot() -> None:
    # MEM-CONF-4: config is a snapshot taken at creation
    spy, defaults = Spy(), {"queryLimit": 5}
    memory = create_memory(spy, defaults=defaults)
    defaults["queryLimit"] = 50
    memory.query({})
    assert spy.limits() == [5]


def test_invalid_factory_defaults_fail_at_creation() -> None:
    # MEM-CONF-2 / MEM-ERR-1: factory defaults must be limits 1-10000 (start-up error)
    for bad in ({"queryLimit": 0}, {"searchLimit": "10"}, {"queryLimit": 1.5}, {"other": 1}):
        with pytest.raises(ConfigError):
            create_memory(Spy(), defaults=bad)
        with pytest.raises(ConfigError):
            create_memory_worker(Spy(), defaults=bad)


def test_invalid_runtime_defaults_are_invalid_input() -> None:
    # MEM-CONF-2 / MEM-ERR-1: a bad runtime layer -> INVALID_INPUT naming the field
    spy = Spy()
    result = create_memory(spy).execute("MEMORY.QUERY", {}, {"queryLimit": True})
    assert code(result) == "INVALID_INPUT" and "defaults.queryLimit" in err(result).message
    assert spy.calls == []


def test_credentials_never_come_from_the_request() -> None:
    # MEM-CONF-5: connection settings are not part of any request contract
    spy = Spy()
    result = create_memory(spy).query({"databaseUrl": "postgresql://u:p@h/db"})
    assert code(result) == "INVALID_INPUT" and "databaseUrl" in err(result).message
    assert "postgresql" not in err(result).message and spy.calls == []


# --- MEM-PY-1 -------------------------------------------------------------------------


def test_create_memory_takes_objects_and_never_reads_ditto_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MEM-PY-1: the factories take plugin objects; create_memory never reads ditto.yaml
    (tmp_path / "ditto.yaml").write_text("workers:\n  memory:\n    queryLimit: 7\n")
    monkeypatch.chdir(tmp_path)
    spy = Spy()
    create_memory(spy).query({})
    create_memory_worker(spy).handle("MEMORY.QUERY", {}, NodeContext("e"))
    assert spy.limits() == [100, 100]


def test_memory_resources_shape() -> None:
    # MEM-PY-1: MemoryResources {store, search?} unpacks into the factories
    store = Spy()
    resources = MemoryResources(store=store)
    assert resources.search is None
    memory = create_memory(resources.store, resources.search)
    assert memory.store is store and memory.has_search


# --- MEM-NODE / worker ----------------------------------------------------------------


DESCRIPTORS = [
    memory_get_node,
    memory_query_node,
    memory_search_node,
    memory_write_node,
    memory_update_node,
    memory_delete_node,
]


def test_node_descriptors_types() -> None:
    # MEM-NODE-2: descriptors expose .type, the node id
    assert [d.type for d in DESCRIPTORS] == list(NODE_IDS)


def test_worker_registers_all_six_nodes_reusing_the_plugin() -> None:
    # MEM-NODE-3 / MEM-RUN-4: all six nodes; one worker definition reuses the injected objects
    spy = Spy()
    worker = create_memory_worker(spy, concurrency=16)
    assert isinstance(worker, MemoryWorker)
    assert (worker.type, set(worker.handlers), worker.concurrency) == ("MEMORY", set(NODE_IDS), 16)
    ctx = NodeContext("e")
    worker.handle("MEMORY.GET", {"ids": ["a"]}, ctx)
    worker.handle("MEMORY.SEARCH", {"query": "q"}, ctx)
    assert [c[0] for c in spy.calls] == ["get", "search"]
    assert worker.memory is not None and worker.memory.store is spy


def test_worker_and_sdk_return_the_same_shape() -> None:
    # MEM-NODE-3: create_memory and the worker return the same NodeResult
    returned = [{"id": "a", "key": "k", "content": None}]
    for node, request_ in [("MEMORY.GET", {"ids": ["a"]}), ("MEMORY.QUERY", {"limit": 1})]:
        spy = Spy(get=returned, query={"items": returned})
        sdk = create_memory(spy).execute(node, request_, execution_id="e1")
        via_worker = create_memory_worker(spy).handle(node, request_, NodeContext("e1"))
        assert to_wire(sdk) == to_wire(via_worker)
        assert to_wire(sdk)["status"] == "success"


def test_raw_outputs_wrapped_once_as_contract_models() -> None:
    # MEM-NODE-1: each node's raw output is wrapped once in a NodeResult
    spy = Spy(write=[{"id": "w", "content": 1}], delete={"deleted": ["w"]})
    worker = create_memory_worker(spy)
    ctx = NodeContext("e")
    write = worker.handle("MEMORY.WRITE", {"memories": [{"content": 1}]}, ctx)
    delete = worker.handle("MEMORY.DELETE", {"ids": ["w"]}, ctx)
    assert isinstance(write, NodeResult) and to_wire(write)["output"] == [{"id": "w", "content": 1}]
    assert to_wire(delete)["output"] == {"deleted": ["w"]}


def test_worker_context_passes_cancel_deadline_and_runtime_defaults() -> None:
    # MEM-PY-2 / MEM-CONF-2: ctx carries the call options and the runtime-YAML layer
    spy = Spy()
    ctx = NodeContext("e9", deadline=4e9, defaults=MemoryDefaults(query_limit=30))
    create_memory_worker(spy).handle("MEMORY.QUERY", {}, ctx)
    create_memory_worker(spy, defaults={"queryLimit": 3}).handle("MEMORY.QUERY", {}, ctx)
    assert spy.limits() == [30, 3]
    options = spy.calls[0][2]
    assert options is not None and (options.execution_id, options.deadline) == ("e9", 4e9)


def test_worker_unknown_node() -> None:
    # MEM-ERR-3: a node the worker does not serve -> UNKNOWN_NODE
    result = create_memory_worker(Spy()).handle("RETRIEVAL.SEARCH", {}, NodeContext("e"))
    assert (result.status, code(result), result.execution_id) == ("failed", "UNKNOWN_NODE", "e")


def test_unknown_node_never_raises() -> None:
    # MEM-ERR-3: odd node ids or an empty execution id still yield a NodeResult
    memory, worker = create_memory(Spy()), create_memory_worker(Spy())
    for result in (memory.execute(None, {}), worker.handle(3, {}, NodeContext(""))):  # type: ignore[arg-type]
        assert (result.status, code(result)) == ("failed", "UNKNOWN_NODE")
        assert result.execution_id


def test_override_replaces_one_handler() -> None:
    # MEM-NODE-2: define() registers a replacement handler that owns the NodeResult itself
    def custom_get(input: Any, ctx: NodeContext) -> Any:  # the seed's customGet, as a dict
        return {
            "executionId": ctx.execution_id,
            "node": "MEMORY.GET",
            "status": "failed",
            "error": {"code": "NOT_CONFIGURED", "message": "Configure the storage adapter"},
        }

    definition = memory_get_node.define("MEMORY", custom_get)
    assert (definition.worker_type, definition.node) == ("MEMORY", "MEMORY.GET")
    spy = Spy()
    worker = create_memory_worker(spy, overrides=[definition])
    result = worker.handle("MEMORY.GET", {"whatever": 1}, NodeContext("e"))
    assert (result.status, code(result)) == ("failed", "NOT_CONFIGURED")
    assert spy.calls == []
    assert worker.handle("MEMORY.QUERY", {}, NodeContext("e")).status == "success"


def test_override_failures_become_node_results() -> None:
    # MEM-NODE-2 / MEM-ERR-4: an override that raises or returns junk still yields a NodeResult
    def boom(input: Any, ctx: NodeContext) -> Any:
        raise RuntimeError("postgresql://user:hunter2@host/db")

    def junk(input: Any, ctx: NodeContext) -> Any:
        return ["not", "a", "result"]

    worker = create_memory_worker(
        Spy(),
        overrides=[
            memory_get_node.define("MEMORY", boom),
            memory_delete_node.define("MEMORY", junk),
        ],
    )
    raised = worker.handle("MEMORY.GET", {}, NodeContext("e"))
    assert code(raised) == "MEMORY_BACKEND_ERROR" and "hunter2" not in err(raised).message
    assert code(worker.handle("MEMORY.DELETE", {}, NodeContext("e"))) == "INVALID_BACKEND_OUTPUT"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"concurrency": True},
        {"concurrency": 2.0},
        {"overrides": [memory_get_node.define("CONTEXT", lambda i, c: None)]},  # type: ignore[arg-type, return-value]
        {"overrides": [memory_get_node.define("MEMORY", lambda i, c: None)] * 2},  # type: ignore[arg-type, return-value]
    ],
)
def test_worker_definition_errors(kwargs: Any) -> None:
    # MEM-RUN-1 / MEM-NODE-2: bad concurrency or overrides fail at definition time
    with pytest.raises(ConfigError):
        create_memory_worker(Spy(), **kwargs)


# --- public API -----------------------------------------------------------------------


def test_all_matches_public_names() -> None:
    # STYLE.md: every public name is in __all__; every name in __all__ exists
    exported = set(ditto_worker.__all__)
    assert len(exported) == len(ditto_worker.__all__), "duplicates in __all__"
    assert all(hasattr(ditto_worker, name) for name in exported)
    tree = ast.parse(Path(ditto_worker.__file__).read_text())
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            defined |= {a.asname or a.name for a in node.names if node.module != "__future__"}
        elif isinstance(node, ast.Import):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    public = {name for name in defined if not name.startswith("_")}
    assert public - exported == set()


def test_public_api_has_the_seed_names_and_core_is_transport_free() -> None:
    # SPEC "Python mapping": the seed's names are importable from the package root
    for name in [
        "create_memory",
        "create_memory_worker",
        "MemoryStore",
        "MemorySearchProvider",
        "MemoryResources",
        "MemoryError",
        "NodeResult",
        "ErrorCode",
        "CancelToken",
        "MemoryCallOptions",
        "Memory",
        "MemoryWorker",
        "NodeContext",
        "Scope",
    ]:
        assert name in ditto_worker.__all__
    # that importing them loads no Celery is tests/unit/test_layers.py
