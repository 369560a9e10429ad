"""The worked ``search`` and ``write`` tasks as MCP tools, with the official client over
stdio (``ditto-worker mcp``) and over authenticated HTTP (``/mcp`` of ``ditto-worker
serve``), the model a scripted OpenAI-compatible fake named by
``DITTO_WORKER_INFER_BASE_URL`` (issue 33 item 3): listed only with a model configured,
a call runs the task and answers its outcome, the scope is the operator's or the token's
only, and another scope neither sees nor resumes the first one's tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from ditto_worker import Scope  # noqa: E402
from ditto_worker.memory_tasks.task_tools import scope_folder  # noqa: E402
from ditto_worker.testing.gateway import GatewayServer  # noqa: E402
from tests.conftest import EVENT_WAIT_S, wait_until  # noqa: E402
from tests.integration._gateway_kit import serving  # noqa: E402
from tests.integration._mcp_kit import (  # noqa: E402
    SCOPE_ARGUMENTS,
    TOOLS,
    call,
    http_client,
    stdio_params,
)
from tests.unit._task_kit import ScriptedModel  # noqa: E402
from tests.unit.test_memory_tasks_preferences import GERMAN, model, proposing  # noqa: E402

TASKS = ["memory_task_search", "memory_task_write"]
SAID = [
    {"role": "assistant", "content": "How should I write to you?"},
    {"role": "user", "content": GERMAN},
]
SCOPE_TRIES: list[dict[str, Any]] = [
    *SCOPE_ARGUMENTS,
    {"request": {"taskId": "x1", "tenant": "other", "conversation": SAID}},
]


@pytest.fixture(scope="module")
def fake() -> Iterator[ScriptedModel]:
    """Proposes German when asked for proposals; writes in the language it is asked for."""
    with model(proposing(GERMAN, "de"), None) as scripted:
        yield scripted


def _model_env(fake: ScriptedModel) -> dict[str, str]:
    return {"DITTO_WORKER_INFER_BASE_URL": fake.server.base_url, "DITTO_WORKER_INFER_MODEL": "fake"}


async def check_write_then_search(client: Client) -> dict[str, Any]:
    """Both task tools listed; ``write`` stores the preference, ``search`` applies and
    cites it; returns the search outcome."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(listed) == sorted(TOOLS + TASKS)
    assert listed["memory_task_write"].input_schema["additionalProperties"] is False
    wrote = await call(
        client, "memory_task_write", {"request": {"taskId": "w1", "conversation": SAID}}
    )
    assert wrote["status"] == "success", wrote["error"]
    assert wrote["artifact"]["admission"]["decision"] == "admitted"
    [saved] = wrote["artifact"]["mutation"]["records"]
    found = await call(client, "memory_task_search", {"request": {"taskId": "s1"}})
    assert found["status"] == "success", found["error"]
    assert found["taskId"] == "s1" and found["kind"] == "search" and found["graphs"] > 0
    assert found["artifact"]["applied"]["language"] == "de"
    assert found["artifact"]["message"].endswith(f"(memory {saved['id']} v1)")
    # the preference is a memory of this scope, read by the node tools too
    got = await call(client, "memory_get", {"ids": [saved["id"]]})
    assert [i["metadata"]["value"] for i in got["output"]] == ["de"]
    return found


async def check_scope_tries(client: Client, fake: ScriptedModel) -> None:
    """A tenant, user, scope, namespace or space in the arguments is ``INVALID_INPUT``,
    and no model call is made."""
    before = fake.calls
    for extra in SCOPE_TRIES:
        for tool in TASKS:
            base = {"request": {"conversation": SAID}} if tool == "memory_task_write" else {}
            answer = await call(client, tool, {**base, **extra})
            assert answer["error"]["code"] == "INVALID_INPUT", (tool, extra, answer)
    assert fake.calls == before


async def check_other_scope(theirs: Client) -> None:
    """Another scope: the first one's task id is a new task of its own, with no
    preference to recall (English, nothing cited)."""
    found = await call(theirs, "memory_task_search", {"request": {"taskId": "s1"}})
    assert found["status"] == "success", found["error"]
    assert found["artifact"]["memories"] == [] and found["artifact"]["applied"]["language"] == "en"
    assert "(memory " not in found["artifact"]["message"]


def test_task_tools_over_stdio(tmp_path: Path, fake: ScriptedModel) -> None:
    db = tmp_path / "m.sqlite"
    env = _model_env(fake)

    async def main() -> None:
        async with Client(stdio_params("tenant=acme,user=alice", db)) as bare:
            names = [t.name for t in (await bare.list_tools()).tools]
            assert sorted(names) == sorted(TOOLS)  # no model configured: no task tools
        async with Client(stdio_params("tenant=acme,user=alice", db, **env)) as alice:
            found = await check_write_then_search(alice)
            await check_scope_tries(alice, fake)
            for other in ("tenant=acme,user=bob", "tenant=other,user=alice"):
                async with Client(stdio_params(other, db, **env)) as theirs:
                    await check_other_scope(theirs)
        root = tmp_path / ".ditto" / "artifacts"
        assert len(list(root.glob("*/s1.json"))) == 3  # one task s1 per scope, apart
        published = root / scope_folder(Scope("acme", "alice")) / "s1.json"
        assert json.loads(published.read_text()) == found["artifact"]

    anyio.run(main)


def test_a_stdio_task_past_its_task_timeout_answers_timeout(tmp_path: Path) -> None:
    """``ditto-worker mcp --task-timeout S``: with the model stalled, the task call answers
    ``timeout`` (``GRAPH_TIMEOUT``) instead of waiting on the model, and the server keeps
    serving (the node tools still answer)."""
    stalled = threading.Event()

    def stall(body: Any) -> Any:
        stalled.wait(EVENT_WAIT_S)  # released when the test ends
        return proposing(GERMAN, "de")

    with ScriptedModel(stall) as slow:
        params = stdio_params(
            "tenant=acme,user=alice",
            tmp_path / "m.sqlite",
            "--task-timeout",
            "3",
            **_model_env(slow),
        )

        async def main() -> None:
            async with Client(params) as alice:
                arguments = {"request": {"taskId": "w1", "conversation": SAID}}
                late = await call(alice, "memory_task_write", arguments)
                assert late["status"] == "timeout", late
                assert late["error"]["code"] == "GRAPH_TIMEOUT", late
                got = await call(alice, "memory_get", {"ids": ["none"]})
                assert got["status"] == "success", got

        try:
            anyio.run(main)
        finally:
            stalled.set()


T1, T2, MEMORY_ONLY, READER = "task-one", "task-two", "task-memory-only", "task-reader"
TASK_SPACES = 'spaces: [memory, "task:*"]'


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, fake: ScriptedModel
) -> Iterator[GatewayServer]:
    tokens = {
        T1: f"tenant: t1, user: u1, {TASK_SPACES}",
        T2: f"tenant: t2, user: u1, {TASK_SPACES}",
        MEMORY_ONLY: "tenant: t1, user: u1",
        READER: f'tenant: t1, user: u1, nodes: ["MEMORY.GET"], {TASK_SPACES}',
    }
    env = {"DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": "", **_model_env(fake)}
    folder = tmp_path_factory.mktemp("mcp-tasks")
    mcp = f"  mcp: {{artifactsDir: '{folder / 'published'}'}}\n"
    with serving(folder, tokens, gateway=mcp, env=env) as server:
        yield server


def test_task_tools_over_authenticated_http(gateway: GatewayServer, fake: ScriptedModel) -> None:
    async def main() -> None:
        async with http_client(f"{gateway.url}/mcp", T1) as t1:
            found = await check_write_then_search(t1)
            await check_scope_tries(t1, fake)
        async with http_client(f"{gateway.url}/mcp", T2) as t2:
            await check_other_scope(t2)
        # gateway.mcp.artifactsDir: one folder per tenant and user inside it
        published = gateway.folder / "published" / scope_folder(Scope("t1", "u1")) / "s1.json"
        assert json.loads(published.read_text()) == found["artifact"]
        assert not (gateway.folder / ".ditto").exists()

    anyio.run(main)
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    assert 'ditto_gateway_calls_total{code="",node="TASK.SEARCH",status="success"}' in metrics


def test_a_token_needs_every_grant_of_the_task(gateway: GatewayServer, fake: ScriptedModel) -> None:
    before = fake.calls

    async def main() -> None:
        for token, says in ((MEMORY_ONLY, "space 'task:"), (READER, "may not call")):
            async with http_client(f"{gateway.url}/mcp", token) as client:
                for tool in TASKS:
                    arguments = {"request": {"taskId": "g1", "conversation": SAID}}
                    answer = await call(client, tool, arguments)
                    assert answer["error"]["code"] == "PERMISSION_DENIED", (token, answer)
                    assert says in answer["error"]["message"]

    anyio.run(main)
    assert fake.calls == before


@pytest.mark.integration
def test_task_tools_over_stdio_on_a_fleet(
    redis_url: str, tmp_path: Path, fake: ScriptedModel
) -> None:
    db = tmp_path / "fleet.sqlite"
    fleet = {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": redis_url}
    env = {**os.environ, **fleet, **_model_env(fake), "DITTO_WORKER_MEMORY_SQLITE_PATH": str(db)}
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "memory,context,infer",
         "--pool", "threads", "--concurrency", "4", "--loglevel", "INFO"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: "ready." in (tmp_path / "worker.log").read_text() or worker.poll(),
                   "the worker is ready")  # fmt: skip
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        # the server's own store path points nowhere: only the fleet's worker has the data
        unused = tmp_path / "unused.sqlite"

        async def main() -> None:
            async with Client(stdio_params("tenant=acme,user=alice", unused, **fleet,
                                           **_model_env(fake))) as alice:  # fmt: skip
                await check_write_then_search(alice)

        anyio.run(main)
        assert not unused.exists() and db.exists()
    finally:
        worker.terminate()
        worker.wait(timeout=120)
        log.close()
