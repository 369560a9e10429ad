"""Unknown is not zero: INFER.GENERATE's ``usage`` (SPEC.md MEM-INF-1, issue 23 item 3).

An endpoint that streams no usage gave ``usage: {promptTokens: 0, completionTokens: 0}``,
indistinguishable from a real zero. Now: ``usage: null`` whenever the endpoint did not
report both counts (none, ``null``s, only one, or something that is not a count), a real
``0`` stays ``0``, and the log line says ``unknown``. Embedded and on the fleet the output
goes through the same contract model; the fleet's wire form keeps ``null``
(``test_the_wire_form_keeps_null``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ditto_worker.contracts import NodeResult
from ditto_worker.infer import INFER_GENERATE, InferGenerateOutput, create_infer_worker
from ditto_worker.runtime import NodeContext
from tests.unit._fake_chat import FakeChatServer, FakeConn, chunk, reply_script, usage

MSGS = [{"role": "user", "content": "say hi"}]


def generate(script: Any) -> dict[str, Any]:
    with FakeChatServer(script) as fake:
        definition = create_infer_worker(
            {"baseUrl": fake.base_url, "model": "m1"}, env={}, dotenv_path=None
        )
        out: dict[str, Any] = definition.nodes[INFER_GENERATE].handler(
            {"messages": MSGS}, NodeContext("exec-usage")
        )
    return out


def streamed(*events: Any) -> Any:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk("hi"))
        conn.event(chunk(finish="stop"))
        for event in events:
            conn.event(event)
        conn.event("[DONE]")
        conn.end()

    return script


def test_no_usage_streamed_is_null_and_logged_unknown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ditto_worker.infer")
    out = generate(reply_script("hi", report_usage=False))
    assert out["text"] == "hi"
    assert "usage" in out and out["usage"] is None
    (line,) = [r.getMessage() for r in caplog.records if "exec-usage" in r.getMessage()]
    assert "prompt_tokens=unknown completion_tokens=unknown" in line
    assert "=0" not in line.replace("latency_ms=0", "")


def test_a_real_zero_stays_zero(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ditto_worker.infer")
    out = generate(streamed(usage(0, 0)))
    assert out["usage"] == {"promptTokens": 0, "completionTokens": 0}
    assert "prompt_tokens=0 completion_tokens=0" in caplog.text


@pytest.mark.parametrize(
    "report",
    [
        usage(None, None),  # both null
        usage(None, None, completion_tokens=3),  # only one count
        usage(None, None, prompt_tokens=4),
        usage(None, None, total_tokens=7),  # neither of the two
        usage("7", 2),  # not counts: unknown (logged), the reply itself stands
        usage(-1, 2),
        usage(True, 2),
        usage(1.5, 2),
        {"object": "chat.completion.chunk", "choices": [], "usage": None},
    ],
    ids=["nulls", "completion-only", "prompt-only", "total-only", "string", "negative",
         "bool", "fraction", "usage-null"],
)  # fmt: skip
def test_anything_but_both_counts_is_null(report: dict[str, Any]) -> None:
    out = generate(streamed(report))
    assert out["text"] == "hi" and out["usage"] is None


def test_counts_split_over_chunks_and_integral_floats_are_known() -> None:
    # vLLM-style: usage on several chunks, a later null field keeps the earlier count
    out = generate(streamed(usage(None, None, prompt_tokens=5.0), usage(None, 2)))
    assert out["usage"] == {"promptTokens": 5, "completionTokens": 2}


def test_the_wire_form_keeps_null() -> None:
    # the fleet sends the NodeResult as JSON and the client rebuilds it: null stays null
    out = generate(reply_script("hi", report_usage=False))
    model = InferGenerateOutput.model_validate(out)
    assert model.usage is None
    wire = NodeResult[InferGenerateOutput](
        execution_id="e", node=INFER_GENERATE, status="success", output=model
    ).model_dump(mode="json", by_alias=True)
    assert wire["output"]["usage"] is None
    back = NodeResult[InferGenerateOutput].model_validate(wire)
    assert back.output is not None and back.output.usage is None
    assert InferGenerateOutput.model_json_schema()["properties"]["usage"]["anyOf"][1] == {
        "type": "null"
    }
