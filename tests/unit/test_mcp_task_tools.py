"""The worked ``search`` and ``write`` tasks as MCP tools, in process (issue 33 item 3): the
official client on the server object, a scripted model on the fake chat endpoint. Offered
only when a model is configured; the scope is the trusted caller's, never an argument's;
grants are checked before anything runs; the answer is the task's outcome."""

from __future__ import annotations

import json
import threading
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from ditto_worker import Scope, create_ditto, create_memory_worker  # noqa: E402
from ditto_worker.integrations.mcp import create_mcp_server, runtime_call, runtime_specs  # noqa: E402
from ditto_worker.memory_tasks.task_tools import (  # noqa: E402
    TaskToolOutcome,
    run_task_tool,
    task_tools,
    task_tools_offered,
)
from ditto_worker.runtime import Runtime  # noqa: E402
from ditto_worker.testing import create_store  # noqa: E402
from tests.conftest import EVENT_WAIT_S  # noqa: E402
from tests.integration._mcp_kit import SCOPE_ARGUMENTS, call  # noqa: E402
from tests.unit._fake_chat import FakeConn  # noqa: E402
from tests.unit._task_kit import ScriptedModel, task_runtime  # noqa: E402
from tests.unit.test_memory_tasks_preferences import GERMAN, model, proposing  # noqa: E402

ALICE = Scope("acme", "alice")
BOB = Scope("acme", "bob")
OTHER_TENANT = Scope("other", "alice")
SIX = [
    "memory_get",
    "memory_query",
    "memory_search",
    "memory_write",
    "memory_update",
    "memory_delete",
]
TASKS = ["memory_task_search", "memory_task_write"]
DEADLINE_S = 3.0
"""The whole-task deadline of the timeout test: short, as any value shows the bound (the
model stalls until its stream is closed)."""
SAID = [
    {"role": "assistant", "content": "How should I write to you?"},
    {"role": "user", "content": GERMAN},
]


def _server(runtime: Runtime, scope: Scope, folder: Path) -> Any:
    extras = (
        task_tools(runtime, lambda: (scope, None), folder) if task_tools_offered(runtime) else []
    )
    return create_mcp_server(runtime_specs(runtime), runtime_call(runtime, scope), extras)


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A scripted model that proposes German and writes in the language it is asked for,
    named as the runtime's configured endpoint (``DITTO_WORKER_INFER_BASE_URL``)."""
    with model(proposing(GERMAN, "de"), None) as fake:
        monkeypatch.setenv("DITTO_WORKER_INFER_BASE_URL", fake.server.base_url)
        yield fake


def test_no_task_tools_without_a_configured_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DITTO_WORKER_INFER_BASE_URL", raising=False)
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        assert not task_tools_offered(runtime)  # an INFER worker, but no model configured

        async def main() -> None:
            async with Client(_server(runtime, ALICE, tmp_path)) as client:
                assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(SIX)

        anyio.run(main)
    monkeypatch.setenv("DITTO_WORKER_INFER_BASE_URL", "http://127.0.0.1:9/v1")
    memory_only = create_ditto([create_memory_worker(create_store({}, {}))])
    try:
        assert not task_tools_offered(memory_only)  # a model configured, but no INFER node
    finally:
        memory_only.close()


def test_write_then_search_through_the_tools(tmp_path: Path, configured: ScriptedModel) -> None:
    with task_runtime(tmp_path, configured) as (runtime, _):
        assert task_tools_offered(runtime)

        async def main() -> None:
            async with Client(_server(runtime, ALICE, tmp_path / "artifacts")) as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert sorted(listed) == sorted(SIX + TASKS)
                schema = listed["memory_task_write"].input_schema
                assert schema["required"] == ["request"] and schema["additionalProperties"] is False
                assert listed["memory_task_search"].output_schema is not None
                wrote = await call(
                    client, "memory_task_write", {"request": {"taskId": "w1", "conversation": SAID}}
                )
                assert wrote["status"] == "success", wrote
                assert wrote["artifact"]["admission"]["decision"] == "admitted"
                [saved] = wrote["artifact"]["mutation"]["records"]
                found = await call(client, "memory_task_search", {"request": {"taskId": "s1"}})
                assert found["status"] == "success", found
                artifact = found["artifact"]
                assert artifact["applied"]["language"] == "de"
                assert artifact["message"].endswith(f"(memory {saved['id']} v1)")
                assert TaskToolOutcome.model_validate(found).wire() == found
                [published] = (tmp_path / "artifacts").glob("*/s1.json")
                assert json.loads(published.read_text()) == artifact
                fresh = await call(client, "memory_task_search", {})  # a new task id
                assert fresh["taskId"].startswith("mcp-") and fresh["status"] == "success"

        anyio.run(main)


SCOPE_TRIES: list[dict[str, Any]] = [
    *SCOPE_ARGUMENTS,
    {"request": {"taskId": "x1", "tenant": "other"}},
    {"request": {"taskId": "x2", "user": "bob"}},
    {"request": {"taskId": "x3", "kind": "update"}},
    {"model": {"tenant": "other"}},
]


def test_scope_comes_from_the_trusted_side_only(tmp_path: Path, configured: ScriptedModel) -> None:
    with task_runtime(tmp_path, configured) as (runtime, _):

        async def main() -> None:
            async with Client(_server(runtime, ALICE, tmp_path)) as alice:
                for extra in SCOPE_TRIES:
                    for tool in TASKS:
                        base = {"request": {"conversation": SAID}} if tool == TASKS[1] else {}
                        answer = await call(alice, tool, {**base, **extra})
                        assert answer["status"] == "failed", (tool, extra, answer)
                        assert answer["error"]["code"] == "INVALID_INPUT", answer
                assert configured.calls == 0  # nothing reached the model
                wrote = await call(
                    alice, "memory_task_write", {"request": {"taskId": "w1", "conversation": SAID}}
                )
                assert wrote["status"] == "success", wrote
            for other in (BOB, OTHER_TENANT):
                async with Client(_server(runtime, other, tmp_path)) as theirs:
                    # Alice's task id again: their own task, not Alice's checkpoints
                    found = await call(theirs, "memory_task_search", {"request": {"taskId": "w1"}})
                    assert found["status"] == "success", found["error"]
                    assert found["artifact"]["kind"] == "search"
                    assert found["artifact"]["memories"] == []
                    assert found["artifact"]["applied"]["language"] == "en"

        anyio.run(main)


def test_grants_are_checked_before_anything_runs(tmp_path: Path, configured: ScriptedModel) -> None:
    with task_runtime(tmp_path, configured) as (runtime, _):
        arguments = {"request": {"taskId": "w1", "conversation": SAID}}
        no_write = partial(
            run_task_tool,
            runtime,
            "memory_task_write",
            arguments,
            ALICE,
            tmp_path,
            allows=lambda node, space: node != "MEMORY.WRITE",
        )
        denied = anyio.run(no_write)
        assert denied.status == "failed" and denied.error is not None
        assert (
            denied.error["code"] == "PERMISSION_DENIED"
            and "MEMORY.WRITE" in denied.error["message"]
        )
        memory_only = partial(
            run_task_tool,
            runtime,
            "memory_task_search",
            {},
            ALICE,
            tmp_path,
            allows=lambda node, space: space == "memory",
        )
        spaced = anyio.run(memory_only)
        assert spaced.error is not None and "space 'task:" in spaced.error["message"]
        assert configured.calls == 0
        assert not list(tmp_path.glob("*/*.json"))


def _stalling(fake: ScriptedModel) -> tuple[threading.Event, list[Any]]:
    """Make ``fake`` stall every request: it starts the stream and waits for the client to
    close it (recorded on the request's ``Seen``). Returns the event set when a request
    arrives and the list of those requests."""
    reached = threading.Event()
    seen: list[Any] = []

    def stall(conn: FakeConn) -> None:
        seen.append(conn.seen)
        reached.set()
        conn.start()
        conn.wait_client_close(EVENT_WAIT_S)

    fake.server.script = stall
    return reached, seen


def test_a_cancelled_tool_call_cancels_the_model_call_in_flight(
    tmp_path: Path, configured: ScriptedModel
) -> None:
    """The client cancels ``tools/call`` (the SDK sends ``notifications/cancelled``): the
    task's INFER call in flight is cancelled — its HTTP stream to the model is closed —
    and the same task id then completes."""
    script = configured.server.script
    reached, seen = _stalling(configured)
    with task_runtime(tmp_path, configured) as (runtime, _):

        async def main() -> None:
            async with Client(_server(runtime, ALICE, tmp_path / "artifacts")) as client:
                arguments = {"request": {"taskId": "w1", "conversation": SAID}}
                async with anyio.create_task_group() as group:
                    group.start_soon(call, client, "memory_task_write", arguments)
                    assert await anyio.to_thread.run_sync(reached.wait, EVENT_WAIT_S)
                    group.cancel_scope.cancel()
                closed = await anyio.to_thread.run_sync(seen[0].closed.wait, EVENT_WAIT_S)
                assert closed, "the model's stream stayed open after the cancel"
                configured.server.script = script
                wrote = await call(client, "memory_task_write", arguments)
                assert wrote["status"] == "success", wrote
                assert wrote["artifact"]["admission"]["decision"] == "admitted"

        anyio.run(main)


def test_a_task_past_its_deadline_answers_timeout_and_resumes(
    tmp_path: Path, configured: ScriptedModel
) -> None:
    """``timeout_s`` bounds the whole task: a stalled model makes the call answer
    ``timeout`` (not hang), the model call in flight is closed, and the same task id
    completes once the model answers."""
    script = configured.server.script
    reached, seen = _stalling(configured)
    with task_runtime(tmp_path, configured) as (runtime, _):
        outcomes: list[str] = []
        tools = task_tools(
            runtime,
            lambda: (ALICE, None),
            tmp_path / "artifacts",
            timeout_s=DEADLINE_S,
            on_outcome=lambda _, outcome: outcomes.append(outcome.status),
        )
        server = create_mcp_server(runtime_specs(runtime), runtime_call(runtime, ALICE), tools)

        async def main() -> None:
            async with Client(server) as client:
                arguments = {"request": {"taskId": "w1", "conversation": SAID}}
                late = await call(client, "memory_task_write", arguments)
                assert late["status"] == "timeout", late
                assert late["error"]["code"] == "GRAPH_TIMEOUT", late  # the task's loop
                if reached.is_set():  # the deadline may pass before the model is asked
                    closed = await anyio.to_thread.run_sync(seen[0].closed.wait, EVENT_WAIT_S)
                    assert closed, "the model's stream stayed open after the deadline"
                configured.server.script = script
                wrote = await call(client, "memory_task_write", arguments)
                assert wrote["status"] == "success", wrote

        anyio.run(main)
        assert outcomes == ["timeout", "success"]
