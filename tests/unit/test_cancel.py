"""A deadline is a timeout, never a cancel (SPEC.md MEM-RUN-6; issue 23 item 2).

The token records why it was cancelled and when (:class:`CancelToken`), and every place
that turns a stopped call into a status asks it (:meth:`CancelToken.outcome`): the
envelope around every handler (``run_node``), the embedded runtime, the MEMORY SDK, Graph
runs and loops. Each test here is deterministic; the race between deadlines, handlers and
cancels at volume is tests/integration/test_deadline_stress.py (embedded and a real
worker).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import CancelToken, NodeError, NodeResult, create_ditto, graph
from ditto_worker.config import load_runtime_config
from ditto_worker.runtime import NodeContext, NodeSpec, Runtime, WorkerDefinition
from ditto_worker.runtime.cancel import CancelRegistry, stop_outcome
from ditto_worker.runtime.execute import run_node

# --- the token ------------------------------------------------------------------------------


def test_the_first_reason_and_time_win() -> None:
    token = CancelToken()
    assert (token.cancelled, token.reason, token.cancelled_at) == (False, None, None)
    token.cancel("timeout", at=100.0)
    token.cancel("cancelled", at=50.0)
    assert (token.cancelled, token.reason, token.cancelled_at) == (True, "timeout", 100.0)


def test_an_explicit_cancel_is_the_default_and_records_now() -> None:
    token = CancelToken()
    before = time.time()
    token.cancel()
    assert token.reason == "cancelled"
    assert token.cancelled_at is not None and before <= token.cancelled_at <= time.time()


@pytest.mark.parametrize(
    ("reason", "at", "deadline", "expected"),
    [
        ("cancelled", 10.0, 20.0, "cancelled"),  # requested before the deadline
        ("cancelled", 20.0, 20.0, "timeout"),  # at the deadline: it had passed
        ("cancelled", 30.0, 20.0, "timeout"),  # after it
        ("cancelled", 30.0, None, "cancelled"),  # no deadline
        ("timeout", 30.0, 20.0, "timeout"),  # the ticker
        ("timeout", 10.0, 20.0, "timeout"),  # a caller giving up early is still a timeout
    ],
)
def test_outcome_of_a_cancelled_token(
    reason: Any, at: float, deadline: float | None, expected: str
) -> None:
    token = CancelToken()
    token.cancel(reason, at=at)
    assert token.outcome(deadline) == expected


def test_outcome_of_a_token_not_cancelled() -> None:
    token = CancelToken()
    assert token.outcome(None) is None
    assert token.outcome(20.0, now=19.0) is None
    assert token.outcome(20.0, now=20.0) == "timeout"
    assert stop_outcome(None, time.time() - 1) == "timeout"
    assert stop_outcome(None, time.time() + 60) is None
    assert stop_outcome(None, None) is None


def test_a_link_passes_the_reason_and_time_on() -> None:
    parent, child, late = CancelToken(), CancelToken(), CancelToken()
    unlink = parent.link(child)
    parent.cancel("timeout", at=5.0)
    assert (child.reason, child.cancelled_at) == ("timeout", 5.0)
    parent.link(late)  # linked after the cancel: at once
    assert (late.reason, late.cancelled_at) == ("timeout", 5.0)
    unlink()


def test_an_unlinked_child_is_not_cancelled() -> None:
    parent, child = CancelToken(), CancelToken()
    parent.link(child)()
    parent.cancel()
    assert not child.cancelled


def test_a_callback_that_raises_does_not_stop_the_others_nor_the_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token, seen = CancelToken(), []

    def broken() -> None:
        raise RuntimeError("Event loop is closed")

    token.on_cancel(broken)
    token.on_cancel(lambda: seen.append("after"))
    token.cancel()  # a caller's cancel never raises for someone else's callback
    assert seen == ["after"] and token.reason == "cancelled"
    assert "a cancel callback raised" in caplog.text


def test_the_registry_expires_deadlines_as_timeouts_and_cancels_by_id_as_cancels() -> None:
    registry = CancelRegistry()
    with (
        registry.running("late", time.time() - 1) as late,
        registry.running("mine", time.time() + 60) as mine,
        registry.running("gave-up", time.time() + 60) as gave_up,
    ):
        assert registry.expire_deadlines() == 1
        registry.cancel("mine")
        registry.cancel("gave-up", reason="timeout")
        assert (late.reason, mine.reason, gave_up.reason) == ("timeout", "cancelled", "timeout")


# --- run_node: the handler's cancel path never decides ------------------------------------


def _definition(handler: Any) -> tuple[WorkerDefinition, NodeSpec]:
    spec = NodeSpec("DEMO.RUN", handler)
    return WorkerDefinition.of("DEMO", [spec]), spec


def _raises_cancelled(input: Any, ctx: NodeContext) -> Any:
    ctx.cancel.wait(5)
    if ctx.cancel.cancelled:  # a handler mapping any stopped token to its cancelled code
        raise NodeError("DEMO_CANCELLED", "the demo call was cancelled")
    return {"done": True}


def _returns_cancelled(input: Any, ctx: NodeContext) -> Any:
    ctx.cancel.wait(5)
    return NodeResult.failure(ctx.execution_id, ctx.node, "DEMO_CANCELLED", "stopped", "cancelled")


def _raises_timeout(input: Any, ctx: NodeContext) -> Any:
    ctx.cancel.wait(5)
    time.sleep(max(0.0, (ctx.deadline or 0) - time.time()) + 0.01)  # notices it late
    raise NodeError("DEMO_TIMEOUT", "the demo call timed out")


@pytest.mark.parametrize("handler", [_raises_cancelled, _returns_cancelled])
def test_a_token_cancelled_by_the_deadline_ends_timeout(handler: Any) -> None:
    definition, spec = _definition(handler)
    token = CancelToken()
    ctx = NodeContext("e1", cancel=token, deadline=time.time() + 0.05)
    threading.Timer(0.06, token.cancel, args=("timeout",)).start()  # the ticker
    result = run_node(definition, spec, {}, ctx)
    assert (result.status, result.error and result.error.code) == ("timeout", "DEMO_TIMEOUT")


def test_an_explicit_cancel_after_the_deadline_ends_timeout() -> None:
    definition, spec = _definition(_raises_cancelled)
    token = CancelToken()
    ctx = NodeContext("e1", cancel=token, deadline=time.time() + 0.02)
    threading.Timer(0.05, token.cancel).start()  # explicit, but the deadline passed first
    result = run_node(definition, spec, {}, ctx)
    assert (result.status, result.error and result.error.code) == ("timeout", "DEMO_TIMEOUT")


def test_a_cancel_before_the_deadline_noticed_after_it_ends_cancelled() -> None:
    definition, spec = _definition(_raises_timeout)
    token = CancelToken()
    ctx = NodeContext("e1", cancel=token, deadline=time.time() + 0.1)
    token.cancel()
    result = run_node(definition, spec, {}, ctx)
    assert (result.status, result.error and result.error.code) == ("cancelled", "DEMO_CANCELLED")


def test_a_stopped_call_is_refused_with_the_tokens_status() -> None:
    definition, spec = _definition(_raises_cancelled)
    token = CancelToken()
    token.cancel(at=time.time() - 5)
    now = time.time()
    late = run_node(definition, spec, {}, NodeContext("e1", cancel=token, deadline=now - 1))
    early = run_node(definition, spec, {}, NodeContext("e2", cancel=token, deadline=now + 9))
    assert (late.status, early.status) == ("cancelled", "cancelled")  # requested before both
    expired = run_node(definition, spec, {}, NodeContext("e3", deadline=time.time() - 1))
    assert (expired.status, expired.error and expired.error.code) == ("timeout", "DEMO_TIMEOUT")


# --- the embedded runtime, its Graphs and loops ---------------------------------------------


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    definition, _ = _definition(_raises_cancelled)
    rt = create_ditto([definition], load_runtime_config(None, env={}))
    yield rt
    rt.close()


def test_embedded_a_deadline_is_a_timeout(runtime: Runtime) -> None:
    for _ in range(20):
        result = runtime.invoke("DEMO.RUN", {}, timeout=0.02)
        assert (result.status, result.error and result.error.code) == ("timeout", "DEMO_TIMEOUT")


def test_embedded_a_cancel_before_the_deadline_is_a_cancel(runtime: Runtime) -> None:
    token = CancelToken()
    threading.Timer(0.02, token.cancel).start()
    result = runtime.invoke("DEMO.RUN", {}, timeout=5, cancel=token)
    assert (result.status, result.error and result.error.code) == ("cancelled", "DEMO_CANCELLED")


def test_embedded_a_token_cancelled_after_the_deadline_before_sending_is_a_timeout(
    runtime: Runtime,
) -> None:
    token = CancelToken()
    token.cancel()
    result = runtime.invoke("DEMO.RUN", {}, deadline=time.time() - 1, cancel=token)
    assert result.status == "timeout"


def test_a_graph_node_past_the_runs_deadline_is_a_timeout(runtime: Runtime) -> None:
    plan = graph("g").node("a", "DEMO.RUN", []).node("b", "DEMO.RUN", ["a"])
    result = runtime.run(plan, {}, timeout=0.05)
    assert (result.status, result.error and result.error.code) == ("timeout", "GRAPH_TIMEOUT")
    a, b = result.results["a"], result.results["b"]
    assert (a.status, a.error and a.error.code) == ("timeout", "DEMO_TIMEOUT")
    assert (b.status, b.error and b.error.code) == ("timeout", "GRAPH_TIMEOUT")


def test_a_graph_cancelled_before_its_deadline_is_cancelled(runtime: Runtime) -> None:
    token = CancelToken()
    threading.Timer(0.03, token.cancel).start()
    result = runtime.run(graph("g").node("a", "DEMO.RUN", []), {}, timeout=5, cancel=token)
    assert (result.status, result.error and result.error.code) == ("cancelled", "GRAPH_CANCELLED")
    a = result.results["a"]
    assert (a.status, a.error and a.error.code) == ("cancelled", "DEMO_CANCELLED")


def test_a_loop_past_its_deadline_is_a_timeout(runtime: Runtime) -> None:
    def plan(_input: Any) -> Any:
        while True:
            yield graph("g").node("a", "DEMO.RUN", []), {}

    result = runtime.loop(plan, None, timeout=0.05)
    assert (result.status, result.error and result.error.code) == ("timeout", "GRAPH_TIMEOUT")
    assert result.graphs[-1].results["a"].status == "timeout"


def test_the_docs_page_runs_as_written() -> None:
    # docs/deadlines.md: every python block runs as written
    page = (Path(__file__).parents[2] / "docs" / "deadlines.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/deadlines.md", "exec"), {})
