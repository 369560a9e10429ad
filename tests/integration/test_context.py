"""The CONTEXT worker's cache mode on a real Redis (SPEC.md MEM-CTX-2/3; issue 15).

Handlers are called directly with a NodeContext (the runtime that serves them on the
fleet is issue 12). Cases: round trip and key layout; Redis and the in-process cache
agree on random sequences (hypothesis); 8 concurrent writers x 200 updates; TTL expiry;
limits write nothing; Redis killed mid-load and frozen: every call ends by its deadline
with CONTEXT_UNAVAILABLE / CONTEXT_TIMEOUT / CONTEXT_CANCELLED, never a fallback; scoped
calls never reach another scope's key (hypothesis, the scope strategy of
tests/unit/test_scope.py); messages and logs carry no URL or password.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ditto_worker.context import (
    ContextCacheUpdateOutput,
    ContextLoadOutput,
    ContextWorkerSettings,
    InProcessContextCache,
    create_context_worker,
)
from ditto_worker.contracts import to_wire
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory.scope import Scope
from ditto_worker.runtime import NodeContext, WorkerDefinition
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.testing.servers import RedisServer, free_port
from tests.conftest import EVENT_WAIT_S, missing_service
from tests.unit.test_scope import ODD

pytestmark = pytest.mark.integration

GRACE_S = 1.5  # scheduling slack on a busy machine; the waits themselves end at the deadline


def item(id: str, content: str = "c", **metadata: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": id, "sourceNode": "MEMORY.SEARCH", "content": content}
    if metadata:
        out["metadata"] = metadata
    return out


class Nodes:
    """The two handlers of one definition, called with a NodeContext of one scope."""

    def __init__(self, definition: WorkerDefinition, scope: Scope | None) -> None:
        self.definition = definition
        self.scope = scope
        self._update = definition.nodes["CONTEXT.UPDATE"].handler
        self._load = definition.nodes["CONTEXT.LOAD"].handler

    def ctx(self, deadline_s: float | None = 5.0, **kw: Any) -> NodeContext:
        deadline = None if deadline_s is None else time.time() + deadline_s
        return NodeContext(str(uuid.uuid4()), scope=self.scope, deadline=deadline, **kw)

    def update(self, name: str, ingress: list[dict[str, Any]], **kw: Any) -> Any:
        body: dict[str, Any] = {"name": name, "ingress": ingress}
        if "ttl_s" in kw:
            body["ttlS"] = kw.pop("ttl_s")
        return self._update(body, self.ctx(**kw))

    def load(self, name: str, **kw: Any) -> Any:
        return self._load({"name": name}, self.ctx(**kw))

    def outcome(self, fn: Any, *args: Any, **kw: Any) -> tuple[str, Any, float]:
        """``(code or "ok", output or message, seconds)``; never raises a NodeError."""
        start = time.monotonic()
        try:
            out = fn(*args, **kw)
            return "ok", out, time.monotonic() - start
        except NodeError as exc:
            return exc.code, exc.safe_message, time.monotonic() - start


def redis_nodes(url: str, scope: Scope | None = None, **settings: Any) -> Nodes:
    definition = create_context_worker(ContextWorkerSettings(redis_url=url, **settings))
    return Nodes(definition, scope or Scope("acme", f"user-{uuid.uuid4().hex[:8]}"))


@pytest.fixture
def nodes(redis_url: str) -> Iterator[Nodes]:
    made = redis_nodes(redis_url)
    yield made
    assert made.definition.close is not None
    made.definition.close()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A throwaway redis-server of this test alone (to kill or freeze)."""
    srv = RedisServer()
    try:
        srv.start()
    except RuntimeError as exc:
        srv.close()
        missing_service(f"no redis-server: {exc}")
    yield srv
    if srv.proc is not None:
        srv.proc.send_signal(signal.SIGCONT)
    srv.close()


# --- round trip ---------------------------------------------------------------------------


def test_round_trip_key_layout_and_ttl(nodes: Nodes, redis_client: redis.Redis) -> None:
    scope = Scope("acme", "a:b%")
    nodes.scope = scope
    first = nodes.update("plan:1", [item("a", "中文", score=0.5, tags=[]), item("b")])
    assert isinstance(first, ContextCacheUpdateOutput) and first.version == 1
    second = nodes.update("plan:1", [item("c"), item("a", "A")], ttl_s=100)
    assert [(i.id, i.content) for i in second.items] == [("a", "A"), ("b", "c"), ("c", "c")]
    assert second.version == 2
    key = "acme:a%3Ab%25:context:plan%3A1"
    assert scope.key("context", "plan:1") == key
    assert redis_client.keys("*") == [key.encode()]
    assert 99_000 < redis_client.pttl(key) <= 100_000
    loaded = nodes.load("plan:1")
    assert to_wire(loaded) == {"found": True, **to_wire(second)}
    assert to_wire(nodes.update("plan:1", [item("b", "x", n=1.5e300, e={})]))["items"][1] == (
        item("b", "x", n=1.5e300, e={})  # metadata survives exactly (no JSON decoded in Lua)
    )  # and this update without ttlS sets the default TTL again
    assert 3_599_000 < redis_client.pttl(key) <= 3_600_000
    redis_client.pexpire(key, 50_000)
    nodes.load("plan:1")
    assert redis_client.pttl(key) <= 50_000  # LOAD leaves the TTL alone


def test_missing_context_is_found_false(nodes: Nodes) -> None:
    assert nodes.load("never") == ContextLoadOutput.missing()


def test_script_flush_is_survived(nodes: Nodes, redis_client: redis.Redis) -> None:
    nodes.update("n", [item("a")])
    redis_client.script_flush()
    assert nodes.update("n", [item("b")]).version == 2  # NOSCRIPT -> EVAL
    assert nodes.load("n").version == 2


# --- same semantics as the in-process cache ---------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("update"),
            st.sampled_from(["n1", "n2"]),
            st.lists(st.tuples(st.sampled_from("abcde"), st.text(max_size=12)), max_size=5),
        ),
        st.tuples(st.just("load"), st.sampled_from(["n1", "n2"]), st.just([])),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_redis_and_in_process_caches_agree(redis_url: str, ops: list[Any]) -> None:
    limits = {"max_items": 4, "max_item_bytes": 100, "max_context_bytes": 200}
    scope = Scope("t", uuid.uuid4().hex)
    on_redis = redis_nodes(redis_url, scope, **limits)
    in_process = Nodes(
        create_context_worker(ContextWorkerSettings(**limits), cache=InProcessContextCache()),
        scope,
    )
    try:
        for op, name, pairs in ops:
            ingress = [item(i, text) for i, text in pairs]
            args = (name, ingress) if op == "update" else (name,)
            got = [
                n.outcome(getattr(n, op), *args)[:2] for n in (on_redis, in_process)
            ]  # ("ok", output) or (code, message)
            assert got[0] == got[1], (op, name, pairs)
    finally:
        assert on_redis.definition.close is not None
        on_redis.definition.close()


# --- concurrency ------------------------------------------------------------------------


@pytest.mark.slow
def test_eight_writers_two_hundred_items_each(redis_url: str) -> None:  # issue 15
    nodes = redis_nodes(redis_url, max_items=2000, concurrency=8)
    versions: list[int] = []
    failures: list[Any] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for i in range(200):
            code, out, _ = nodes.outcome(  # a generous deadline: 8 racing writers, busy cores
                nodes.update, "shared", [item(f"w{w}-{i}", str(i))], deadline_s=EVENT_WAIT_S
            )
            with lock:
                if code == "ok":
                    versions.append(out.version)
                else:
                    failures.append((code, out))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(versions) == list(range(1, 1601))  # one version per update: atomic
    loaded = nodes.load("shared")
    assert loaded.version == 1600
    got = [i.id for i in loaded.items]
    assert sorted(got) == sorted(f"w{w}-{i}" for w in range(8) for i in range(200))
    for w in range(8):  # each writer's items in its own order
        assert [x for x in got if x.startswith(f"w{w}-")] == [f"w{w}-{i}" for i in range(200)]
    assert nodes.definition.close is not None
    nodes.definition.close()


# --- TTL and limits ---------------------------------------------------------------------------


def test_ttl_expiry_is_found_false(nodes: Nodes, redis_client: redis.Redis) -> None:
    nodes.update("short", [item("a")], ttl_s=0.2)
    deadline = time.monotonic() + EVENT_WAIT_S
    while nodes.load("short").found:
        assert time.monotonic() < deadline, "the context never expired"
        time.sleep(0.05)
    assert redis_client.keys("*") == []
    restarted = nodes.update("short", [item("b")])
    assert ([i.id for i in restarted.items], restarted.version) == (["b"], 1)


def test_over_a_limit_nothing_is_written(redis_url: str, redis_client: redis.Redis) -> None:
    nodes = redis_nodes(redis_url, max_items=3, max_item_bytes=150, max_context_bytes=200)
    nodes.update("n", [item("a"), item("b"), item("c")], ttl_s=100)
    key = nodes.scope.key("context", "n") if nodes.scope else ""
    before = redis_client.hgetall(key)
    redis_client.pexpire(key, 50_000)
    cases = [
        ([item("d")], "maxItems"),
        ([item("a", "x" * 60), item("b", "x" * 60)], "maxContextBytes"),
        ([item("a", "x" * 100)], "maxItemBytes"),
        ([item(str(k)) for k in range(4)], "maxItems"),
    ]
    for ingress, limit in cases:
        code, message, _ = nodes.outcome(nodes.update, "n", ingress)
        assert code == ErrorCode.INVALID_INPUT and f"workers.context.{limit}" in message
    assert redis_client.hgetall(key) == before
    assert redis_client.pttl(key) <= 50_000  # not refreshed either
    assert nodes.update("n", [item("b", "B")]).version == 2  # a replacement fits


# --- faults -------------------------------------------------------------------------------


def test_redis_killed_mid_load_ends_every_call_by_its_deadline(server: RedisServer) -> None:
    nodes = redis_nodes(server.url, concurrency=4)
    nodes.update("n", [item(f"i{k}", "x" * 200) for k in range(200)])
    results: list[tuple[float, str, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    deadline_s = 1.0

    def reader() -> None:
        while not stop.is_set():
            started = time.monotonic()
            code, out, took = nodes.outcome(nodes.load, "n", deadline_s=deadline_s)
            if code == "ok":
                assert out.found and len(out.items) == 200
            with lock:
                results.append((started, code, took))

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    kill_started = time.monotonic()
    server.stop()  # SIGKILL, then wait for the process to be gone
    dead = time.monotonic()
    time.sleep(0.6)
    stop.set()
    for t in threads:
        t.join(deadline_s + GRACE_S + 5)
        assert not t.is_alive()
    assert max(took for _, _, took in results) < deadline_s + GRACE_S
    before = {code for started, code, took in results if started + took < kill_started}
    after = {code for started, code, _ in results if started > dead}
    assert before == {"ok"}
    # A dead Redis refuses at once (CONTEXT_UNAVAILABLE); on a busy machine the refusal can
    # come after the call's deadline, and then the call says so (CONTEXT_TIMEOUT) -- never
    # before it.
    assert after and after <= {ErrorCode.CONTEXT_UNAVAILABLE, ErrorCode.CONTEXT_TIMEOUT}
    timed_out = [took for _, code, took in results if code == ErrorCode.CONTEXT_TIMEOUT]
    assert all(took >= deadline_s - 0.01 for took in timed_out), timed_out
    assert {code for _, code, _ in results} <= {
        "ok",
        ErrorCode.CONTEXT_UNAVAILABLE,
        ErrorCode.CONTEXT_TIMEOUT,
    }
    # Redis back (empty, no persistence): a miss, never a copy from somewhere else
    server.start()
    assert nodes.load("n") == ContextLoadOutput.missing()
    assert nodes.definition.close is not None
    nodes.definition.close()


def test_frozen_redis_deadline_timeout_and_cancel(server: RedisServer) -> None:
    nodes = redis_nodes(server.url, timeout_s=0.5)
    nodes.update("n", [item("a")])
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        for fn, args in ((nodes.load, ("n",)), (nodes.update, ("n", [item("b")]))):
            code, message, took = nodes.outcome(fn, *args, deadline_s=0.3)
            assert code == ErrorCode.CONTEXT_TIMEOUT and took < 0.3 + GRACE_S, message
        code, message, took = nodes.outcome(nodes.load, "n", deadline_s=None)  # timeoutS
        assert code == ErrorCode.CONTEXT_UNAVAILABLE and "0.500 s" in message
        assert took < 0.5 + GRACE_S
        token = CancelToken()
        threading.Timer(0.1, token.cancel).start()
        code, _, took = nodes.outcome(nodes.load, "n", deadline_s=30, cancel=token)
        assert code == ErrorCode.CONTEXT_CANCELLED and took < 0.1 + GRACE_S
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert nodes.load("n").found  # the same cache serves again
    assert nodes.definition.close is not None
    nodes.definition.close()


def test_damaged_entry_and_safe_messages(
    nodes: Nodes, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert nodes.scope is not None
    redis_client.set(nodes.scope.key("context", "n"), "not a hash")
    for fn, args in ((nodes.load, ("n",)), (nodes.update, ("n", [item("a")]))):
        code, message, _ = nodes.outcome(fn, *args)
        assert code == ErrorCode.CONTEXT_UNAVAILABLE
        assert "redis://" not in message and "WRONGTYPE" not in message
    secret = f"redis://ditto:s3cret-pw@127.0.0.1:{free_port()}/0"
    down = redis_nodes(secret)
    code, message, took = down.outcome(down.update, "n", [item("a")])
    assert code == ErrorCode.CONTEXT_UNAVAILABLE and "unreachable" in message
    assert "s3cret" not in message and "s3cret" not in caplog.text
    assert "127.0.0.1" not in message


# --- scope isolation --------------------------------------------------------------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    scopes=st.lists(st.tuples(ODD, ODD), min_size=2, max_size=4, unique=True),
    names=st.lists(ODD, min_size=1, max_size=3, unique=True),
)
def test_a_scoped_call_never_reads_another_scopes_key(
    redis_url: str, scopes: list[tuple[str, str]], names: list[str]
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    definition = create_context_worker(ContextWorkerSettings(redis_url=redis_url))
    try:
        everyone = [Nodes(definition, Scope(t, u)) for t, u in scopes]
        for k, me in enumerate(everyone):
            for name in names[: 1 + k % len(names)]:
                me.update(name, [item("who", f"{k}")])
        written = set()
        for k, me in enumerate(everyone):
            assert me.scope is not None
            for j, name in enumerate(names):
                got = me.load(name)
                if j < 1 + k % len(names):
                    assert [(i.id, i.content) for i in got.items] == [("who", f"{k}")]
                    assert got.version == 1
                    written.add(me.scope.key("context", name).encode())
                else:
                    assert got == ContextLoadOutput.missing()
        assert set(client.keys("*")) == written
        assert all(len(key.split(b":")) == 4 for key in written)  # parts never split
    finally:
        assert definition.close is not None
        definition.close()
        client.flushdb()
        client.close()
