"""INFER usage on the fleet (SPEC.md MEM-INF-1, issue 23 item 3): a real Celery worker on
real Redis, the fake chat endpoint streaming no usage. The caller gets ``usage: None`` (the
wire's ``null``), not zeros; an endpoint that reports usage gives the counts, a real 0
included. The embedded path: tests/unit/test_infer_usage.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ditto_worker.fleet.client import DittoClient
from ditto_worker.infer import INFER_GENERATE, create_infer_worker
from tests.unit._fake_chat import FakeChatServer, FakeConn, chunk, reply_script, usage

pytestmark = pytest.mark.integration


def _zero_usage(conn: FakeConn) -> None:
    conn.start()
    conn.event(chunk("hi"))
    conn.event(chunk(finish="stop"))
    conn.event(usage(0, 0))
    conn.event("[DONE]")
    conn.end()


@pytest.fixture(params=["none", "zero", "counts"])
def chat(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeChatServer]]:
    scripts = {
        "none": reply_script("hi", report_usage=False),
        "zero": _zero_usage,
        "counts": reply_script("hi", prompt=9),
    }
    with FakeChatServer(scripts[request.param]) as server:
        yield request.param, server


def test_usage_through_the_fleet(
    start_fleet_worker: Any, client: DittoClient, chat: tuple[str, FakeChatServer]
) -> None:
    kind, server = chat
    settings = {"baseUrl": server.base_url, "model": "m1"}
    with start_fleet_worker(
        lambda: create_infer_worker(settings, env={}, dotenv_path=None),
        queues=["infer.generate"],
    ):
        result = client.invoke(
            INFER_GENERATE, {"messages": [{"role": "user", "content": "hi"}]}, timeout=30
        )
    assert result.status == "success", result.error
    assert result.output is not None and result.output.text == "hi"
    usage_out = result.output.usage
    if kind == "none":
        assert usage_out is None
    else:
        assert usage_out is not None
        expected = (0, 0) if kind == "zero" else (9, 1)
        assert (usage_out.prompt_tokens, usage_out.completion_tokens) == expected
