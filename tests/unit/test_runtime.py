"""The embedded runtime (MEM-RT-1..5): a worker kind as data, served in-process.

The ECHO kind lives in ``tests/fixtures/echo_kind`` and is found only through its entry
point (group ``ditto_worker.workers``): nothing in ``ditto_worker`` knows it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_worker import create_ditto, create_memory_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.errors import ConfigError, NodeError
from ditto_worker.runtime import (
    CancelToken,
    NodeContext,
    NodeSpec,
    Runtime,
    WorkerDefinition,
)
from ditto_worker.testing import InMemoryMemoryStore
from tests.conftest import EVENT_WAIT_S

ECHO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_kind"


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.syspath_prepend(str(ECHO))
    rt = create_ditto(config=load_runtime_config(None, env={}))
    yield rt
    rt.close()


def test_a_kind_from_an_entry_point_runs_with_no_fleet_code(runtime: Runtime) -> None:
    # MEM-RT-1: the ECHO kind is data found by entry point
    assert {"ECHO.SAY", "ECHO.CALL", "MEMORY.GET", "CONTEXT.UPDATE"} <= set(runtime.nodes)
    said = runtime.invoke("ECHO.SAY", {"a": [1, "x"]})
    assert (said.status, said.output, said.node) == (
        "success",
        {"echo": {"a": [1, "x"]}},
        "ECHO.SAY",
    )
    fleet_code = Path(__file__).resolve().parents[2] / "ditto_worker" / "fleet"
    assert not any("ECHO" in p.read_text() for p in fleet_code.glob("*.py"))


def test_sub_calls_inherit_scope_and_deadline(runtime: Runtime) -> None:
    # MEM-RT-3: ctx.invoke inherits the trusted scope and never outlives the caller
    result = runtime.invoke(
        "ECHO.CALL", {"node": "ECHO.WHOAMI"}, scope={"tenant": "t", "user": "u"}, timeout=5
    )
    assert result.status == "success", result.error
    sub, caller = result.output["sub"], result.output["self"]
    assert sub["status"] == "success"
    assert sub["output"]["scope"] == caller["scope"] == {"tenant": "t", "user": "u"}
    assert sub["output"]["deadline"] <= caller["deadline"]
    assert sub["executionId"] != caller["executionId"]
    task = {"tenant": "t", "user": "u", "space": "task:9"}  # issue 25: the space too
    in_task = runtime.invoke("ECHO.CALL", {"node": "ECHO.WHOAMI"}, scope=task, timeout=5)
    assert in_task.output["sub"]["output"]["scope"] == in_task.output["self"]["scope"] == task
    shorter = runtime.invoke("ECHO.CALL", {"node": "ECHO.WHOAMI", "timeout": 1}, timeout=5)
    assert shorter.output["sub"]["output"]["deadline"] < shorter.output["self"]["deadline"] - 3


def test_operation_id_reaches_the_handler_and_is_never_inherited(runtime: Runtime) -> None:
    # MEM-RUN-7: the caller sets it; a sub-call names its own (an effect of its own)
    call = {"node": "ECHO.WHOAMI"}
    result = runtime.invoke("ECHO.CALL", call, operation_id="op-1", timeout=5)
    assert result.output["self"]["operationId"] == "op-1"
    assert result.output["sub"]["output"]["operationId"] is None
    own = runtime.invoke("ECHO.CALL", {**call, "operationId": "op-2"}, operation_id="op-1")
    assert own.output["sub"]["output"]["operationId"] == "op-2"
    for bad in ("", "x" * 257, "a\nb", 7):
        refused = runtime.invoke("ECHO.WHOAMI", {}, operation_id=bad)  # type: ignore[arg-type]
        assert refused.error is not None and refused.error.code == "INVALID_INPUT", bad
        assert "operationId" in refused.error.message


def test_cancelling_a_call_cancels_its_sub_call(runtime: Runtime) -> None:
    # MEM-RT-3: cancellation reaches the sub-call; both end at once, not at 30 s
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    start = time.monotonic()
    result = runtime.invoke(
        "ECHO.CALL", {"node": "ECHO.SLEEP", "input": {"seconds": 30}}, cancel=token, timeout=40
    )
    assert time.monotonic() - start < 5
    assert (result.status, result.error.code if result.error else None) == (
        "cancelled",
        "ECHO_CANCELLED",
    )


def test_a_sub_call_ends_at_the_callers_deadline(runtime: Runtime) -> None:
    start = time.monotonic()
    result = runtime.invoke("ECHO.CALL", {"node": "ECHO.SLEEP", "input": {"seconds": 30}},
                            timeout=0.5)  # fmt: skip
    assert time.monotonic() - start < 3
    assert result.status == "timeout" and result.error and result.error.code == "ECHO_TIMEOUT"


@pytest.mark.parametrize(
    ("input", "status", "code"),
    [
        ({"fail": "ECHO_REFUSED"}, "failed", "ECHO_REFUSED"),
        ({"crash": "secret-ish 078-05-1120"}, "failed", "ECHO_UNAVAILABLE"),
        ({"seconds": 5}, "timeout", "ECHO_TIMEOUT"),
    ],
)
def test_every_outcome_is_a_node_result_with_the_kinds_code(
    runtime: Runtime, input: dict[str, Any], status: str, code: str, caplog: Any
) -> None:  # MEM-RT-4
    result = runtime.invoke("ECHO.SLEEP", input, timeout=0.3)
    assert (result.status, result.error.code if result.error else None) == (status, code)
    assert "secret-ish" not in (result.error.message if result.error else "")
    assert "secret-ish" not in caplog.text  # an exception's message is never logged


def test_unknown_nodes_and_non_json_input_are_refused_before_any_handler(
    runtime: Runtime,
) -> None:
    unknown = runtime.invoke("ECHO.SAI", {})
    assert unknown.error is not None and unknown.error.code == "UNKNOWN_NODE"
    assert "ECHO.SAY" in unknown.error.message
    odd = runtime.invoke("ECHO.SAY", {"x": object()})
    assert odd.error is not None and odd.error.code == "INVALID_INPUT"
    nan = runtime.invoke("ECHO.SAY", {"x": float("nan")})
    assert nan.error is not None and nan.error.code == "INVALID_INPUT"


def test_concurrency_limits_concurrent_entry() -> None:
    # MEM-RUN-1: a definition's concurrency bounds the handlers running at once
    running, peak, lock = [0], [0], threading.Lock()

    def handler(input: Any, ctx: NodeContext) -> Any:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return {}

    kind = WorkerDefinition.of("SLOT", [NodeSpec("SLOT.RUN", handler)], concurrency=2)
    with create_ditto([kind], load_runtime_config(None, env={})) as rt:

        async def many() -> list[Any]:
            return await asyncio.gather(*(rt.ainvoke("SLOT.RUN", {}) for _ in range(8)))

        results = asyncio.run(many())
    assert all(r.status == "success" for r in results)
    assert peak[0] == 2


def test_ainvoke_cancellation_reaches_the_handler() -> None:
    seen: list[bool] = []

    def handler(input: Any, ctx: NodeContext) -> Any:
        seen.append(ctx.cancel.wait(10))
        return {}

    kind = WorkerDefinition.of("WAIT", [NodeSpec("WAIT.FOR", handler)])
    with create_ditto([kind], load_runtime_config(None, env={})) as rt:

        async def cancel_it() -> None:
            task = asyncio.ensure_future(rt.ainvoke("WAIT.FOR", {}, timeout=20))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_it())
        deadline = time.monotonic() + EVENT_WAIT_S
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert seen == [True]


def test_the_memory_worker_is_one_definition_among_others() -> None:
    store = InMemoryMemoryStore()
    with create_ditto([create_memory_worker(store)], load_runtime_config(None, env={})) as rt:
        written = rt.invoke("MEMORY.WRITE", {"memories": [{"key": "k", "content": {"a": 1}}]})
        assert written.status == "success"
        got = rt.invoke("MEMORY.GET", {"keys": ["k"]})
        assert got.output == written.output
        assert rt.invoke("MEMORY.QUERY", {"limit": 0}).error.code == "INVALID_INPUT"
        scoped = rt.invoke("MEMORY.QUERY", {}, scope={"tenant": "a", "user": "b"})
        assert scoped.status == "success" and scoped.output.items == []


def test_two_definitions_of_one_node_are_a_config_error() -> None:
    a = WorkerDefinition.of("DUP", [NodeSpec("DUP.X", lambda i, c: i)])
    b = WorkerDefinition.of("DUP", [NodeSpec("DUP.X", lambda i, c: i)])
    with pytest.raises(ConfigError):
        create_ditto([a, b], load_runtime_config(None, env={}))
    with pytest.raises(ConfigError):
        WorkerDefinition.of("DUP", [NodeSpec("OTHER.X", lambda i, c: i)])
    with pytest.raises(NodeError):
        raise NodeError("X", "y")


def test_embedded_create_ditto_imports_no_celery() -> None:
    # MEM-RT-2/5: the embedded runtime never loads Celery, kombu or a Redis client
    program = f"""
import json, sys
sys.path.insert(0, {str(ECHO)!r})
from ditto_worker import create_ditto
from ditto_worker.config import load_runtime_config
with create_ditto(config=load_runtime_config(None, env={{}})) as rt:
    said = rt.invoke("ECHO.SAY", {{"x": 1}})
    wrote = rt.invoke("MEMORY.QUERY", {{}})
print(json.dumps({{"said": said.status, "wrote": wrote.status,
                   "loaded": [m for m in ("celery", "kombu", "redis") if m in sys.modules]}}))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, check=True, cwd=ECHO)  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"said": "success", "wrote": "success", "loaded": []}


# --- open hooks before the first call (issue 25) -------------------------------------------


def _slow_open_definition(opened: list[float], open_s: float, fail: bool = False) -> Any:
    def open_hook() -> None:
        opened.append(time.monotonic())
        if fail:
            raise RuntimeError("no model here")
        time.sleep(open_s)

    def whoami(input: Any, ctx: NodeContext) -> Any:
        return {"opened": len(opened), "remaining": ctx.remaining_s}

    return WorkerDefinition.of("SLOW", [NodeSpec("SLOW.CALL", whoami)], open=open_hook)


def test_a_definition_opens_before_its_first_call_outside_the_deadline() -> None:
    opened: list[float] = []
    config = load_runtime_config(None, env={})
    with create_ditto([_slow_open_definition(opened, 1.5)], config) as rt:
        results: list[Any] = []
        callers = [threading.Thread(target=lambda: results.append(
            rt.invoke("SLOW.CALL", {}, timeout=1.0))) for _ in range(3)]  # fmt: skip
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(30)
        # a 1.5 s start never charged to a 1 s timeout; the hook ran once for three callers
        assert [r.status for r in results] == ["success"] * 3, [r.error for r in results]
        assert len(opened) == 1
        assert all(r.output["remaining"] > 0.5 for r in results)
        assert rt.invoke("SLOW.CALL", {}, timeout=1.0).output["opened"] == 1


def test_runtime_open_opens_now_and_a_failing_hook_leaves_the_handler_to_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    opened: list[float] = []
    config = load_runtime_config(None, env={})
    with create_ditto([_slow_open_definition(opened, 0.0)], config) as rt:
        rt.open()
        rt.open()
        assert len(opened) == 1
    failing: list[float] = []
    with create_ditto([_slow_open_definition(failing, 0.0, fail=True)], config) as rt:
        result = rt.invoke("SLOW.CALL", {}, timeout=5)
        assert result.status == "success"  # the hook failed; the handler still ran
        assert rt.invoke("SLOW.CALL", {}, timeout=5).status == "success"
        assert len(failing) == 1  # tried once before calls, not before every call
        assert "open hook of SLOW failed (RuntimeError)" in caplog.text
        assert "no model here" not in caplog.text
        with pytest.raises(RuntimeError):
            rt.open(["SLOW.CALL"])  # an explicit open tries again and raises
        assert len(failing) == 2
