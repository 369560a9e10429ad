"""The CONTEXT worker without a server (SPEC.md MEM-CTX; issue 15).

Pure merge (cases and hypothesis properties against a one-item-at-a-time model), the
contracts' strictness, the two modes of CONTEXT.UPDATE, limits, and the cache mode on
the in-process cache with a fake clock (TTL, version, scope). The same semantics on a
real Redis: tests/integration/test_context.py. fakeredis is not used: it runs no Lua
without the optional ``lupa`` package.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ditto_worker.config import load_runtime_config
from ditto_worker.context import (
    ContextCacheUpdateOutput,
    ContextItem,
    ContextLoadOutput,
    ContextUpdateOutput,
    ContextWorkerSettings,
    InProcessContextCache,
    collapse_ingress,
    create_context_worker,
    item_json,
    merge_items,
)
from ditto_worker.contracts import to_wire
from ditto_worker.errors import ConfigError, ErrorCode, NodeError
from ditto_worker.memory.scope import Scope
from ditto_worker.runtime import NodeContext, WorkerDefinition
from ditto_worker.runtime.cancel import CancelToken

SCOPE = Scope("acme", "alice")


def item(id: str, content: str = "c", **metadata: Any) -> dict[str, Any]:
    """A context item in wire form."""
    out: dict[str, Any] = {"id": id, "sourceNode": "MEMORY.SEARCH", "content": content}
    if metadata:
        out["metadata"] = metadata
    return out


def ids(items: list[ContextItem]) -> list[str]:
    return [i.id for i in items]


class Clock:
    """A settable ``time.monotonic`` stand-in."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def worker(
    cache: InProcessContextCache | None = None, **settings: Any
) -> tuple[WorkerDefinition, Any, Any]:
    definition = create_context_worker(
        ContextWorkerSettings(**settings),
        cache=cache if cache is not None else InProcessContextCache(),
    )
    return (
        definition,
        definition.nodes["CONTEXT.UPDATE"].handler,
        definition.nodes["CONTEXT.LOAD"].handler,
    )


def ctx(scope: Scope | None = SCOPE, **kw: Any) -> NodeContext:
    return NodeContext("exec-1", node="CONTEXT.UPDATE", scope=scope, **kw)


def code_of(call: Any) -> tuple[str, str]:
    with pytest.raises(NodeError) as caught:
        call()
    return caught.value.code, caught.value.safe_message


# --- pure merge (MEM-CTX-1) -------------------------------------------------------------


def test_seed_example_merges_search_hits_into_an_empty_context() -> None:  # MEM-CTX-1
    _, update, _ = worker()
    hits = [item("memory:m1", "zh-CN", memoryId="m1", relevance=0.9), item("memory:m2", "{}")]
    out = update({"context": {"items": []}, "ingress": hits}, ctx(None))
    assert isinstance(out, ContextUpdateOutput)
    assert to_wire(out) == {"items": hits}


def test_replace_in_place_append_new_in_ingress_order() -> None:  # MEM-CTX-1
    _, update, _ = worker()
    context = {"items": [item("a", "1"), item("b", "2"), item("c", "3")]}
    ingress = [item("d", "4"), item("b", "B", k=1), item("e", "5")]
    out = update({"context": context, "ingress": ingress}, ctx(None))
    assert to_wire(out)["items"] == [
        item("a", "1"),
        item("b", "B", k=1),
        item("c", "3"),
        item("d", "4"),
        item("e", "5"),
    ]


def test_a_repeated_ingress_id_ends_as_its_last_value_at_its_first_place() -> None:
    _, update, _ = worker()
    ingress = [item("x", "1"), item("y", "2"), item("x", "3")]
    out = update({"context": {"items": [item("a")]}, "ingress": ingress}, ctx(None))
    assert [(i.id, i.content) for i in out.items] == [("a", "c"), ("x", "3"), ("y", "2")]


def test_replacement_drops_old_metadata_and_keeps_nothing_else() -> None:
    old = ContextItem.model_validate(item("a", "old", k=1))
    new = ContextItem.model_validate(item("a", "new"))
    assert merge_items([old], [new]) == [new]
    assert merge_items([old], []) == [old]


def test_pure_mode_needs_no_scope_and_stores_nothing() -> None:
    cache = InProcessContextCache()
    _, update, _ = worker(cache)
    update({"context": {"items": []}, "ingress": [item("a")]}, ctx(None))
    assert len(cache) == 0


ID = st.sampled_from("abcdef")
ITEMS = st.builds(
    lambda i, c, m: ContextItem(id=i, source_node="N", content=c, metadata=m),
    ID,
    st.text(max_size=3),
    st.none() | st.dictionaries(st.text(max_size=2), st.integers(-9, 9), max_size=2),
)


def _sequential(items: list[ContextItem], ingress: list[ContextItem]) -> list[ContextItem]:
    """The rule stated item by item: replace the same id where it is, else append."""
    out = list(items)
    for new in ingress:
        places = [k for k, old in enumerate(out) if old.id == new.id]
        if places:
            out[places[0]] = new
        else:
            out.append(new)
    return out


@given(base=st.lists(ITEMS, unique_by=lambda i: i.id), ingress=st.lists(ITEMS, max_size=10))
def test_merge_is_the_item_by_item_rule(
    base: list[ContextItem], ingress: list[ContextItem]
) -> None:
    merged = merge_items(base, ingress)
    assert merged == _sequential(base, ingress)
    # ids stay distinct; old order is a prefix; every ingress id is present with its last value
    assert len(set(ids(merged))) == len(merged)
    assert ids(merged)[: len(base)] == ids(base)
    last = {i.id: i for i in ingress}
    assert all(m == last.get(m.id, m) for m in merged)
    # untouched items are unchanged, in place
    assert all(m == b for m, b in zip(merged, base, strict=False) if b.id not in last)
    # collapsing the ingress first changes nothing; merging in two batches is the same
    assert merge_items(base, collapse_ingress(ingress)) == merged
    cut = len(ingress) // 2
    assert merge_items(merge_items(base, ingress[:cut]), ingress[cut:]) == merged
    # idempotent: the same ingress again changes nothing
    assert merge_items(merged, ingress) == merged


# --- contracts and modes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"context": {"items": []}, "ingress": [item("a") | {"content": 1}]}, "ingress[0].content"),
        ({"context": {"items": []}, "ingress": [item("a") | {"content": None}]}, "content"),
        ({"context": {"items": []}, "ingress": [item("")]}, "ingress[0].id"),
        ({"context": {"items": []}, "ingress": [{"id": "a", "content": "c"}]}, "sourceNode"),
        ({"context": {"items": []}, "ingress": [item("a") | {"metadata": [1]}]}, "metadata"),
        ({"context": {"items": []}, "ingress": [item("a") | {"extra": 1}]}, "extra"),
        ({"context": {"items": [item("a"), item("a")]}, "ingress": []}, "context.items"),
        ({"context": {"items": []}}, "ingress"),
        ({"context": [], "ingress": []}, "context"),
        ({"name": "n", "ingress": [], "ttlS": True}, "ttlS"),
        ({"name": "n", "ingress": [], "ttlS": "60"}, "ttlS"),
        ({"name": "n", "ingress": [], "ttlS": 0}, "ttlS"),
        ({"name": "", "ingress": []}, "name"),
        ({"name": "x" * 257, "ingress": []}, "name"),
        ({"name": 5, "ingress": []}, "name"),
    ],
)
def test_bad_input_is_invalid_input_naming_the_field(body: dict[str, Any], field: str) -> None:
    cache = InProcessContextCache()
    _, update, _ = worker(cache)
    code, message = code_of(lambda: update(body, ctx()))
    assert code == ErrorCode.INVALID_INPUT
    assert field in message
    assert len(cache) == 0


@pytest.mark.parametrize(
    "body",
    [{}, {"ingress": []}, {"name": "n", "context": {"items": []}, "ingress": []}, [], "x"],
)
def test_update_needs_exactly_one_of_context_and_name(body: Any) -> None:
    _, update, _ = worker()
    code, message = code_of(lambda: update(body, ctx()))
    assert code == ErrorCode.INVALID_INPUT
    assert "input" in message


def test_load_input_is_checked() -> None:
    _, _, load = worker()
    for body, field in [({}, "name"), ({"name": "n", "x": 1}, "x"), ([], "input")]:
        code, message = code_of(lambda body=body: load(body, ctx()))
        assert code == ErrorCode.INVALID_INPUT and field in message


def test_definition_shape_and_output_types() -> None:  # MEM-RT-1
    definition, _, _ = worker(concurrency=3)
    assert definition.kind == "CONTEXT"
    assert [(n.id, n.queue, n.mutation) for n in definition.nodes.values()] == [
        ("CONTEXT.UPDATE", "context.update", False),
        ("CONTEXT.LOAD", "context.load", False),
    ]
    assert definition.concurrency == 3
    assert definition.kind_codes.timeout == ErrorCode.CONTEXT_TIMEOUT
    assert definition.kind_codes.failed == ErrorCode.CONTEXT_UNAVAILABLE
    from pydantic import TypeAdapter

    adapter = TypeAdapter(definition.nodes["CONTEXT.UPDATE"].output)
    assert isinstance(adapter.validate_python({"items": []}), ContextUpdateOutput)
    assert isinstance(
        adapter.validate_python({"items": [], "version": 2}), ContextCacheUpdateOutput
    )


def test_creating_a_redis_worker_connects_to_nothing() -> None:  # MEM-RT-5
    definition = create_context_worker(ContextWorkerSettings(redis_url="redis://127.0.0.1:1/0"))
    assert definition.close is not None
    definition.close()


# --- cache mode on the in-process cache (MEM-CTX-2) ---------------------------------------


def test_cache_round_trip_version_and_scope_key() -> None:  # MEM-CTX-2
    cache = InProcessContextCache()
    _, update, load = worker(cache)
    assert load({"name": "plan"}, ctx()) == ContextLoadOutput.missing()
    first = update({"name": "plan", "ingress": [item("a"), item("b")]}, ctx())
    assert isinstance(first, ContextCacheUpdateOutput)
    assert (ids(first.items), first.version) == (["a", "b"], 1)
    second = update({"name": "plan", "ingress": [item("c"), item("a", "A")]}, ctx())
    assert [(i.id, i.content) for i in second.items] == [("a", "A"), ("b", "c"), ("c", "c")]
    assert second.version == 2
    loaded = load({"name": "plan"}, ctx())
    assert (loaded.found, loaded.items, loaded.version) == (True, second.items, 2)
    empty = update({"name": "plan", "ingress": []}, ctx())
    assert (empty.items, empty.version) == (second.items, 3)  # an update is an update
    assert cache.load(SCOPE.key("context", "plan"), timeout_s=1) is not None


def test_cache_mode_without_scope_is_permission_denied() -> None:  # MEM-CTX-2
    cache = InProcessContextCache()
    _, update, load = worker(cache)
    for call in (
        lambda: update({"name": "plan", "ingress": [item("a")]}, ctx(None)),
        lambda: load({"name": "plan"}, ctx(None)),
    ):
        assert code_of(call)[0] == ErrorCode.PERMISSION_DENIED
    assert len(cache) == 0


def test_scopes_and_names_do_not_share_contexts() -> None:
    _, update, load = worker()
    a, b = Scope("t", "u:x"), Scope("t:u", "x")  # would collide without encoding
    update({"name": "n", "ingress": [item("a")]}, ctx(a))
    assert not load({"name": "n"}, ctx(b)).found
    assert not load({"name": "N"}, ctx(a)).found
    assert load({"name": "n"}, ctx(a)).found


def test_spaces_do_not_share_contexts() -> None:  # issue 25: the host binds the space
    cache = InProcessContextCache()
    _, update, load = worker(cache)
    memory, task = Scope("t", "u"), Scope.for_task("t", "u", "job-1")
    update({"name": "n", "ingress": [item("a")]}, ctx(task))
    assert not load({"name": "n"}, ctx(memory)).found
    assert not load({"name": "n"}, ctx(Scope.for_task("t", "u", "job-2"))).found
    assert load({"name": "n"}, ctx(task)).found
    assert cache.load("t:u:task:job-1:context:n", timeout_s=1) is not None


def test_ttl_expires_and_every_update_restarts_it() -> None:  # MEM-CTX-2
    clock = Clock()
    _, update, load = worker(InProcessContextCache(clock=clock), ttl_s=10)
    update({"name": "n", "ingress": [item("a")]}, ctx())
    clock.now += 9
    update({"name": "n", "ingress": [item("b")]}, ctx())
    clock.now += 9  # 18 s after the first update, 9 after the second
    assert load({"name": "n"}, ctx()).version == 2
    clock.now += 1.5
    assert load({"name": "n"}, ctx()) == ContextLoadOutput.missing()
    again = update({"name": "n", "ingress": [item("c")], "ttlS": 0.5}, ctx())
    assert (ids(again.items), again.version) == (["c"], 1)  # a new context
    clock.now += 0.6
    assert not load({"name": "n"}, ctx()).found


def test_load_does_not_extend_the_ttl() -> None:
    clock = Clock()
    _, update, load = worker(InProcessContextCache(clock=clock), ttl_s=10)
    update({"name": "n", "ingress": []}, ctx())
    clock.now += 6
    assert load({"name": "n"}, ctx()).found
    clock.now += 6
    assert not load({"name": "n"}, ctx()).found


def test_expired_contexts_are_swept() -> None:
    clock = Clock()
    cache = InProcessContextCache(clock=clock, sweep_every=4)
    _, update, _ = worker(cache, ttl_s=1)
    for n in range(3):
        update({"name": f"n{n}", "ingress": []}, ctx())
    clock.now += 2
    update({"name": "fresh", "ingress": []}, ctx())
    assert len(cache) == 1


def test_ttl_over_max_is_invalid_input() -> None:
    _, update, _ = worker(max_ttl_s=100, ttl_s=50)
    code, message = code_of(lambda: update({"name": "n", "ingress": [], "ttlS": 101}, ctx()))
    assert code == ErrorCode.INVALID_INPUT and "maxTtlS" in message


def test_cancelled_or_expired_call_does_not_touch_the_cache() -> None:
    cache = InProcessContextCache()
    _, update, _ = worker(cache)
    token = CancelToken()
    token.cancel()
    body = {"name": "n", "ingress": [item("a")]}
    assert code_of(lambda: update(body, ctx(cancel=token)))[0] == ErrorCode.CONTEXT_CANCELLED
    late = ctx(deadline=time.time() - 1)
    assert code_of(lambda: update(body, late))[0] == ErrorCode.CONTEXT_TIMEOUT
    assert len(cache) == 0


# --- limits -----------------------------------------------------------------------------


def _size(body: dict[str, Any]) -> int:
    return len(item_json(ContextItem.model_validate(body)).encode())


def test_item_size_is_its_compact_utf8_json() -> None:
    body = item("a", "中文")
    assert _size(body) == len('{"id":"a","sourceNode":"MEMORY.SEARCH","content":"中文"}'.encode())


@pytest.mark.parametrize("mode", ["pure", "cache"])
def test_limits_are_invalid_input_naming_the_limit(mode: str) -> None:
    big = item("big", "x" * 200)
    limits = {"max_items": 3, "max_item_bytes": _size(big) - 1, "max_context_bytes": 300}
    cache = InProcessContextCache()
    _, update, load = worker(cache, **limits)

    def call(ingress: list[dict[str, Any]], base: list[dict[str, Any]] | None = None) -> Any:
        if mode == "pure":
            return update({"context": {"items": base or []}, "ingress": ingress}, ctx())
        return update({"name": "n", "ingress": ingress}, ctx())

    assert "maxItemBytes" in code_of(lambda: call([item("a"), big]))[1]
    assert "ingress[1]" in code_of(lambda: call([item("a"), big]))[1]
    assert "maxItems" in code_of(lambda: call([item(str(k)) for k in range(4)]))[1]
    # a repeated id counts once
    assert len(call([item("a"), item("a"), item("b"), item("c")]).items) == 3
    if mode == "cache":
        assert load({"name": "n"}, ctx()).version == 1
        # the merged context breaks the limit: nothing written
        code, message = code_of(lambda: call([item("d")]))
        assert code == ErrorCode.INVALID_INPUT and "maxItems" in message
        grown = [item("a", "y" * 60), item("b", "y" * 60), item("c", "y" * 60)]
        code, message = code_of(lambda: call(grown))
        assert code == ErrorCode.INVALID_INPUT and "maxContextBytes" in message
        after = load({"name": "n"}, ctx())
        assert after.version == 1 and [i.content for i in after.items] == ["c", "c", "c"]
    else:
        base = [item("a"), item("b"), item("c")]
        assert "maxItems" in code_of(lambda: call([item("d")], base))[1]
        assert len(call([item("b", "B")], base).items) == 3


# --- settings ---------------------------------------------------------------------------


def test_settings_defaults_env_and_config() -> None:
    settings = ContextWorkerSettings()
    assert (settings.redis_url, settings.ttl_s, settings.max_items) == ("", 3600.0, 1000)
    assert (settings.max_item_bytes, settings.max_context_bytes) == (65536, 1048576)
    env = {"DITTO_WORKER_CONTEXT_REDIS_URL": "redis://h:1/2"}
    assert ContextWorkerSettings.from_env({"redisUrl": "redis://y"}, env).redis_url == (
        "redis://h:1/2"
    )
    assert ContextWorkerSettings.from_env({"redisUrl": "redis://y"}, {}).redis_url == "redis://y"
    config = load_runtime_config({"workers": {"context": {"maxItems": 5}}}, env=env)
    assert config.context_worker.max_items == 5
    assert config.context_worker.redis_url == "redis://h:1/2"
    for bad in ({"maxItem": 5}, {"ttlS": 0}, {"ttlS": 100, "maxTtlS": 10}):
        with pytest.raises(ConfigError):
            load_runtime_config({"workers": {"context": bad}}, env={})


def test_no_redis_url_means_the_in_process_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DITTO_WORKER_CONTEXT_REDIS_URL", raising=False)
    definition = create_context_worker()
    update = definition.nodes["CONTEXT.UPDATE"].handler
    assert update({"name": "n", "ingress": [item("a")]}, ctx()).version == 1
    assert definition.close is not None
    definition.close()


# --- module surface -----------------------------------------------------------------------


def _public_names(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("_") and n != "logger"}


@pytest.mark.parametrize(
    "name",
    [
        "ditto_worker.context.cache",
        "ditto_worker.context.contracts",
        "ditto_worker.context.merge",
        "ditto_worker.context.redis_cache",
        "ditto_worker.config.context",
        "ditto_worker.context.worker",
    ],
)
def test_module_all_lists_its_public_names(name: str) -> None:  # STYLE.md
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(_public_names(str(module.__file__)))
    package = importlib.import_module("ditto_worker.context")
    assert all(hasattr(package, n) for n in package.__all__)


def test_importing_the_package_loads_no_redis_cache() -> None:  # MEM-RT-5
    code = (
        "import sys, ditto_worker.context; print('ditto_worker.context.redis_cache' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the open hook (a worker process builds its resources before it announces ready) ------


def test_open_of_a_redis_worker_fails_safely_when_redis_is_down() -> None:
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://:s3cret-pw@127.0.0.1:{port}/0"
    definition = create_context_worker(ContextWorkerSettings(redis_url=url, timeout_s=1))
    assert definition.open is not None
    with pytest.raises(NodeError) as info:
        definition.open()
    assert info.value.code == ErrorCode.CONTEXT_UNAVAILABLE
    assert "s3cret" not in info.value.safe_message and str(port) not in info.value.safe_message


def test_open_without_redis_says_the_cache_is_per_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DITTO_WORKER_CONTEXT_REDIS_URL", raising=False)
    definition = create_context_worker()
    assert definition.open is not None
    definition.open()
    assert "this worker process only" in caplog.text
