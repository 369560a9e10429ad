"""INFER.GENERATE against a loopback fake endpoint: input, structured output, faults,
cancellation and the deadline (SPEC.md MEM-INF). The real model: tests/integration/test_infer.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.infer import INFER_GENERATE, InferGenerateOutput, create_infer_worker
from ditto_worker.runtime import NodeContext, WorkerDefinition
from ditto_worker.runtime.cancel import CancelToken
from tests.unit._fake_chat import (
    FakeChatServer,
    FakeConn,
    chunk,
    free_port,
    reply_script,
    usage,
)

MSGS = [{"role": "user", "content": "PROMPT-MARKER-7d1 say hi"}]
SCHEMA = {
    "type": "object",
    "properties": {"language": {"type": "string"}, "style": {"enum": ["short", "long"]}},
    "required": ["language", "style"],
    "additionalProperties": False,
}


def worker(base_url: str, **settings: Any) -> WorkerDefinition:
    return create_infer_worker(
        {"baseUrl": base_url, "model": "m1", **settings}, env={}, dotenv_path=None
    )


def call(definition: WorkerDefinition, input: Any, ctx: NodeContext | None = None) -> Any:
    return definition.nodes[INFER_GENERATE].handler(input, ctx or NodeContext("exec-1"))


def failure(definition: WorkerDefinition, input: Any, ctx: NodeContext | None = None) -> NodeError:
    with pytest.raises(NodeError) as info:
        call(definition, input, ctx)
    return info.value


@pytest.fixture(autouse=True)
def _all_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)


def test_the_definition_is_one_node_on_its_own_queue_with_concurrency_one() -> None:
    definition = worker("http://127.0.0.1:9/v1")
    assert definition.kind == "INFER"
    assert list(definition.nodes) == [INFER_GENERATE]
    assert definition.nodes[INFER_GENERATE].queue == "infer.generate"
    assert definition.nodes[INFER_GENERATE].output is InferGenerateOutput
    assert definition.concurrency == 1
    assert definition.kind_codes.cancelled == ErrorCode.INFER_CANCELLED
    assert definition.close is not None
    definition.close()


def test_a_text_reply_and_the_request_it_sends(caplog: pytest.LogCaptureFixture) -> None:
    # MEM-INF-1
    with FakeChatServer(reply_script("REPLY-", "MARKER")) as fake:
        definition = worker(fake.base_url)
        out = call(definition, {"messages": MSGS})
    assert out == {
        "text": "REPLY-MARKER",
        "model": "fake-model",
        "finishReason": "stop",
        "usage": {"promptTokens": 7, "completionTokens": 2},
    }
    (seen,) = fake.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.body == {
        "messages": MSGS,
        "model": "m1",
        "max_tokens": 512,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "Authorization" not in seen.headers
    assert "REPLY-MARKER" not in caplog.text and "PROMPT-MARKER" not in caplog.text
    assert "exec-1" in caplog.text  # the call is logged, by id


def test_max_tokens_and_temperature_pass_through() -> None:
    with FakeChatServer(reply_script("x")) as fake:
        call(worker(fake.base_url), {"messages": MSGS, "maxTokens": 9, "temperature": 0.5})
    assert fake.requests[0].body["max_tokens"] == 9
    assert fake.requests[0].body["temperature"] == 0.5


def test_the_api_key_goes_only_into_the_authorization_header() -> None:
    with FakeChatServer(reply_script("ok")) as fake:
        definition = create_infer_worker(
            {"baseUrl": fake.base_url},
            env={"DITTO_WORKER_INFER_API_KEY": "sk-SECRET-123"},
            dotenv_path=None,
        )
        call(definition, {"messages": MSGS})
    assert fake.requests[0].headers["Authorization"] == "Bearer sk-SECRET-123"
    assert "model" not in fake.requests[0].body  # no model configured: the server's default
    assert "sk-SECRET" not in repr(definition)


def test_refused_credentials_are_unavailable_without_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def script(conn: FakeConn) -> None:
        conn.start(401, "application/json")
        conn.write('{"error": {"message": "bad key sk-SECRET-123"}}')
        conn.end()

    with FakeChatServer(script) as fake:
        definition = create_infer_worker(
            {"baseUrl": fake.base_url},
            env={"DITTO_WORKER_INFER_API_KEY": "sk-SECRET-123"},
            dotenv_path=None,
        )
        err = failure(definition, {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert err.safe_message == "the model endpoint refused the credentials (HTTP 401)"
    assert "sk-SECRET" not in caplog.text


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (503, "the model endpoint is unavailable (HTTP 503)"),
        (500, "the model endpoint is unavailable (HTTP 500)"),
        (429, "the model endpoint is unavailable (HTTP 429)"),
        (
            400,
            "the model endpoint rejected the request (HTTP 400); e.g. a prompt longer than "
            "its context, an unknown model or a schema it cannot apply",
        ),
    ],
)
def test_an_error_status_is_unavailable_and_never_retried(status: int, message: str) -> None:
    # MEM-INF-3, MEM-ERR-5
    def script(conn: FakeConn) -> None:
        conn.start(status, "application/json")
        conn.write('{"error": {"message": "PROMPT-MARKER-7d1 leaked"}}')
        conn.end()

    with FakeChatServer(script) as fake:
        err = failure(worker(fake.base_url), {"messages": MSGS})
    assert (err.code, err.safe_message) == (ErrorCode.INFER_UNAVAILABLE, message)
    assert len(fake.requests) == 1  # no automatic retry (MEM-ERR-5)


def test_a_refused_connection_is_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    # MEM-INF-3
    base_url = f"http://user:pw-SECRET@127.0.0.1:{free_port()}/v1"
    err = failure(worker(base_url), {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert err.safe_message == "the model endpoint refused or failed the connection"
    assert "SECRET" not in caplog.text


def test_a_connection_cut_mid_reply_is_unavailable() -> None:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk("partial "))
        conn.cut()

    with FakeChatServer(script) as fake:
        err = failure(worker(fake.base_url), {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert "before the reply was complete" in err.safe_message
    assert "partial" not in err.safe_message


def test_a_stream_without_done_or_finish_reason_is_unavailable() -> None:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk("partial"))
        conn.end()

    with FakeChatServer(script) as fake:
        err = failure(worker(fake.base_url), {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert err.safe_message == ("the model endpoint ended the stream before the reply was complete")


def test_a_stream_with_a_finish_reason_but_no_done_is_complete() -> None:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk("all"))
        conn.event(chunk(finish="stop"))
        conn.end()

    with FakeChatServer(script) as fake:
        out = call(worker(fake.base_url), {"messages": MSGS})
    assert out["text"] == "all"
    assert out["usage"] is None  # none reported: unknown, not 0 (MEM-INF-1)
    assert out["finishReason"] == "stop"


def test_a_finish_reason_the_endpoint_never_gave_is_null_not_stop() -> None:
    # issue 37 item 4: unknown is null, like unknown usage (MEM-INF-1)
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk("all"))
        conn.event("[DONE]")
        conn.end()

    with FakeChatServer(script) as fake:
        out = call(worker(fake.base_url), {"messages": MSGS})
    assert out["text"] == "all"
    assert out["finishReason"] is None and out["usage"] is None


@pytest.mark.parametrize(
    "write",
    [
        lambda conn: conn.event("{not json"),
        lambda conn: conn.event({"error": {"message": "PROMPT-MARKER-7d1"}}),
        lambda conn: conn.write('error: {"message": "boom"}\n\n'),
        lambda conn: conn.event({"choices": "nonsense"}),
    ],
    ids=["malformed-json", "error-object", "error-field", "bad-shape"],
)
def test_a_malformed_or_failed_stream_is_unavailable(write: Any) -> None:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk("x"))
        write(conn)
        conn.end()

    with FakeChatServer(script) as fake:
        err = failure(worker(fake.base_url), {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert "PROMPT-MARKER" not in err.safe_message


def test_a_plain_json_answer_is_read_too() -> None:
    def script(conn: FakeConn) -> None:
        conn.start(200, "application/json")
        conn.write(
            json.dumps(
                {
                    "model": "plain",
                    "choices": [
                        {"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                }
            )
        )
        conn.end()

    with FakeChatServer(script) as fake:
        out = call(worker(fake.base_url), {"messages": MSGS})
    assert out["text"] == "hi" and out["model"] == "plain"
    assert out["usage"] == {"promptTokens": 3, "completionTokens": 1}


def test_a_stalled_endpoint_is_unavailable_after_the_read_timeout() -> None:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.wait_client_close(10)

    with FakeChatServer(script) as fake:
        err = failure(worker(fake.base_url, readTimeoutS=0.3), {"messages": MSGS})
    assert (err.code, err.safe_message) == (
        ErrorCode.INFER_UNAVAILABLE,
        "the model endpoint did not answer in time",
    )


# --- cancellation and deadlines: the connection must close at once ----------------------


# The fake endpoint stalls STALL_S unless the client closes first; "at once" is PROMPT_S:
# far under the stall (a call that ignored its cancel or deadline would wait it out) and
# a margin a machine at load 20+ keeps (1.5 s did not: a cancelled thread can wait that
# long for the CPU).
STALL_S = 120.0
PROMPT_S = 10.0


def stalled(conn: FakeConn) -> None:
    """Headers, one token, then nothing (a long prompt evaluation); wait for the client."""
    conn.start()
    conn.event(chunk("tok"))
    conn.wait_client_close(STALL_S)


def _once_requested(fake: FakeChatServer, action: Callable[[], None]) -> None:
    """Run ``action`` on a thread as soon as ``fake`` has the request (a first call may
    spend seconds on imports before it connects: a cancel at a fixed 0.3 s came before
    the request on a busy machine, and nothing was in flight to close)."""

    def watch() -> None:
        deadline = time.monotonic() + STALL_S
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        action()

    threading.Thread(target=watch, daemon=True).start()


def test_cancel_closes_the_request_at_once() -> None:
    # MEM-INF-3
    cancel = CancelToken()
    cancelled_at: list[float] = []

    def fire() -> None:
        cancelled_at.append(time.monotonic())
        cancel.cancel()

    with FakeChatServer(stalled) as fake:
        _once_requested(fake, fire)
        err = failure(worker(fake.base_url), {"messages": MSGS}, NodeContext("e", cancel=cancel))
        returned = time.monotonic()
        assert fake.requests[0].closed.wait(PROMPT_S)  # the client closed it, not the server
    assert (err.code, err.safe_message) == (ErrorCode.INFER_CANCELLED, "the call was cancelled")
    assert returned - cancelled_at[0] < PROMPT_S
    assert fake.requests[0].closed_at is not None
    assert fake.requests[0].closed_at - returned < PROMPT_S  # the server saw the FIN


def test_the_deadline_closes_the_request() -> None:
    # MEM-INF-3: the deadline passes while the request is in flight (a warm call first, so
    # the request goes out well before it)
    with FakeChatServer(reply_script("warm")) as warm:
        assert call(worker(warm.base_url), {"messages": MSGS})["text"] == "warm"
    with FakeChatServer(stalled) as fake:
        deadline = time.time() + 3.0
        ctx = NodeContext("e", deadline=deadline)
        err = failure(worker(fake.base_url), {"messages": MSGS}, ctx)
        assert time.time() - deadline < PROMPT_S
        assert fake.requests[0].closed.wait(PROMPT_S)
        assert fake.requests[0].closed_at is not None
    assert (err.code, err.safe_message) == (ErrorCode.INFER_TIMEOUT, "the call's deadline passed")


def test_the_request_timeout_bounds_a_call_without_a_deadline() -> None:
    def trickle(conn: FakeConn) -> None:
        conn.start()
        for _ in range(100):  # a token every 50 ms: the read timeout never fires
            conn.event(chunk("t"))
            time.sleep(0.05)

    with FakeChatServer(trickle) as fake:
        err = failure(worker(fake.base_url, requestTimeoutS=0.4), {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert "requestTimeoutS" in err.safe_message


def test_a_call_cancelled_or_expired_before_it_starts_sends_nothing() -> None:
    cancel = CancelToken()
    cancel.cancel()
    with FakeChatServer(reply_script("x")) as fake:
        definition = worker(fake.base_url)
        err = failure(definition, {"messages": MSGS}, NodeContext("e", cancel=cancel))
        assert err.code == ErrorCode.INFER_CANCELLED
        err = failure(definition, {"messages": MSGS}, NodeContext("e", deadline=time.time() - 1))
        assert err.code == ErrorCode.INFER_TIMEOUT
    assert fake.requests == []


# --- structured output (MEM-INF-2) -------------------------------------------------------


def test_a_schema_reply_is_parsed_and_validated() -> None:
    # MEM-INF-2
    with FakeChatServer(reply_script('{"language": "de", ', '"style": "short"}')) as fake:
        out = call(worker(fake.base_url), {"messages": MSGS, "responseSchema": SCHEMA})
    assert out["json"] == {"language": "de", "style": "short"}
    assert fake.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": SCHEMA, "strict": True},
    }


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("SECRET-REPLY not json", "the model's reply is not valid JSON"),
        (
            '{"language": "SECRET-REPLY", "style": "SECRET-REPLY"}',
            "the model's reply does not match responseSchema (rule properties/style/enum)",
        ),
        (
            '{"language": "de"}',
            "the model's reply does not match responseSchema (rule required)",
        ),
    ],
)
def test_a_reply_that_does_not_validate_is_invalid_output_without_its_text(
    reply: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    # MEM-INF-2
    with FakeChatServer(reply_script(reply)) as fake:
        err = failure(worker(fake.base_url), {"messages": MSGS, "responseSchema": SCHEMA})
    assert (err.code, err.safe_message) == (ErrorCode.INFER_INVALID_OUTPUT, message)
    assert "SECRET-REPLY" not in caplog.text


def test_a_cut_off_schema_reply_is_invalid_output_but_cut_text_is_returned() -> None:
    with FakeChatServer(reply_script('{"language": "de"}', finish="length")) as fake:
        definition = worker(fake.base_url)
        err = failure(definition, {"messages": MSGS, "responseSchema": SCHEMA})
        out = call(definition, {"messages": MSGS})
    assert err.code == ErrorCode.INFER_INVALID_OUTPUT
    assert err.safe_message == "the model's reply was cut off at maxTokens before it was complete"
    assert out["finishReason"] == "length" and "json" not in out


def test_a_null_structured_reply_is_kept() -> None:
    with FakeChatServer(reply_script("null")) as fake:
        out = call(worker(fake.base_url), {"messages": MSGS, "responseSchema": {"type": "null"}})
    assert "json" in out and out["json"] is None


# --- input (INVALID_INPUT before any I/O) ------------------------------------------------


@pytest.mark.parametrize(
    ("input", "field"),
    [
        ({}, "messages: Field required"),
        ({"messages": []}, "messages: List should have at least 1 item"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user"}]}, "messages[0].content: Field required"),
        ({"messages": MSGS, "maxTokens": "5"}, "maxTokens: Input should be a valid integer"),
        ({"messages": MSGS, "maxTokens": 0}, "maxTokens: Input should be greater than"),
        ({"messages": MSGS, "maxTokens": 10**6}, "maxTokens: at most 8192"),
        ({"messages": MSGS, "temperature": 3}, "temperature: Input should be less than"),
        ({"messages": MSGS, "temperature": True}, "temperature"),
        ({"messages": MSGS, "responseSchema": "yes"}, "responseSchema: Input should be"),
        ({"messages": MSGS, "responseSchema": {"type": "nope"}}, "responseSchema: not a valid"),
        ({"messages": MSGS, "stream": True}, "stream: Extra inputs are not permitted"),
        ("hello", "Input should be"),
    ],
)
def test_bad_input_is_invalid_input_naming_the_field_before_any_request(
    input: Any, field: str
) -> None:
    # MEM-ERR-1
    with FakeChatServer(reply_script("x")) as fake:
        err = failure(worker(fake.base_url), input)
    assert err.code == ErrorCode.INVALID_INPUT
    assert err.safe_message.startswith("Invalid input: ")
    assert field in err.safe_message
    assert "PROMPT-MARKER" not in err.safe_message
    assert fake.requests == []


def test_no_endpoint_and_no_auto_start_is_unavailable() -> None:
    definition = create_infer_worker({"local": {"autoStart": False}}, env={}, dotenv_path=None)
    err = failure(definition, {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE
    assert "autoStart is false" in err.safe_message


def test_usage_of_a_reply_with_several_chunks() -> None:
    def script(conn: FakeConn) -> None:
        conn.start()
        conn.event(chunk(None, role="assistant"))
        conn.event(chunk("a"))
        conn.event(chunk("b", finish="stop"))
        conn.event(usage(11, 2))
        conn.event("[DONE]")
        conn.end()

    with FakeChatServer(script) as fake:
        out = call(worker(fake.base_url), {"messages": MSGS})
    assert out["text"] == "ab"
    assert out["usage"] == {"promptTokens": 11, "completionTokens": 2}


# --- the open hook (a worker process builds its resources before it announces ready) ------


def test_open_builds_the_endpoint_and_probes_it_without_failing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeChatServer(reply_script("hi")) as fake:
        definition = worker(fake.base_url)
        assert definition.open is not None
        definition.open()
        assert "not reachable" not in caplog.text
        assert fake.requests == []  # a GET of /models only: no chat request
        assert call(definition, {"messages": MSGS})["text"] == "hi"
        assert definition.close is not None
        definition.close()
    # nothing listening: a warning, not a failure (the model server may start later)
    definition = worker(f"http://127.0.0.1:{free_port()}/v1")
    assert definition.open is not None
    definition.open()
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("ditto_worker")]
    assert any("INFER: the model endpoint" in m and "not reachable" in m for m in ours)
    assert not any("127.0.0.1" in m for m in ours)  # the URL may hold credentials
    err = failure(definition, {"messages": MSGS})
    assert err.code == ErrorCode.INFER_UNAVAILABLE


def test_open_without_an_endpoint_or_auto_start_fails() -> None:
    definition = create_infer_worker({"local": {"autoStart": False}}, env={}, dotenv_path=None)
    assert definition.open is not None
    with pytest.raises(NodeError) as info:
        definition.open()
    assert info.value.code == ErrorCode.INFER_UNAVAILABLE
