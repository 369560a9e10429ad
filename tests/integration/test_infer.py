"""INFER.GENERATE against the real local model (SPEC.md MEM-INF; issue 16).

One llama.cpp server (xllamacpp, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, one slot) serves the
module; the fault test kills a second one, started by the embedded default itself. All
calls run at temperature 0 with small ``maxTokens`` so two busy cores are enough. The
server uses one thread (``threads=1``): slower than two on an idle machine, but a decode
step stays short when other work shares the cores, which the "slot free within a second"
checks rely on.

The handler is called directly with a :class:`NodeContext`, and once through the fleet: a
real ``ditto-worker worker --nodes infer`` process on real Redis pointed at the module's
server by ``DITTO_WORKER_INFER_BASE_URL``, called with ``DittoClient.invoke`` (text and
schema replies, a cut reply, bad input, a client cancel and a deadline that free the
slot). Needs ``pip install -e ".[infer]"`` (in ``dev``): missing, the tests skip locally
and fail with ``DITTO_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.infer import (
    INFER_GENERATE,
    InferGenerateOutput,
    LocalModelSettings,
    create_infer_worker,
)
from ditto_worker.runtime import NodeContext, WorkerDefinition
from ditto_worker.runtime.cancel import CancelToken
from tests.conftest import EVENT_WAIT_S, missing_service
from tests.integration._procs import WorkerProc

pytestmark = pytest.mark.integration

SETTINGS = LocalModelSettings(threads=1, ctx_size=2048, batch_tokens=64)
PROMPT_MARKER = "zebra-marker-4417"
STOP_TOKENS = 60  # a stopped reply goes idle within this many more tokens (busy cores)
LONG = [{"role": "user", "content": "Count from 1 to 1000, one number per line."}]
PREFERENCE_SCHEMA = {
    "type": "object",
    "properties": {
        "language": {"type": "string", "enum": ["English", "German", "French", "Chinese"]},
        "style": {"type": "string", "enum": ["brief", "detailed"]},
        "quote": {"type": "string", "maxLength": 120},
    },
    "required": ["language", "style", "quote"],
    "additionalProperties": False,
}
PREFERENCE_MESSAGES = [
    {
        "role": "system",
        "content": "Extract the user's communication preference. Answer with JSON only: "
        "language, style (brief or detailed), and quote: the user's own words that state the "
        "preference, copied exactly from the message.",
    },
    {"role": "user", "content": "Please keep your answers short, and write to me in German."},
]


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    try:
        from ditto_worker.infer.local import LocalModelError, LocalModelServer
    except ImportError as exc:  # pragma: no cover - the infer extra is missing
        missing_service(f"ditto_worker.infer.local cannot be imported ({exc})")
    try:
        server = LocalModelServer.start(SETTINGS)
    except LocalModelError as exc:
        missing_service(f"the local model does not start: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def definition(model: Any) -> Iterator[WorkerDefinition]:
    defn = create_infer_worker(
        {"baseUrl": model.base_url, "model": model.model}, env={}, dotenv_path=None
    )
    yield defn
    assert defn.close is not None
    defn.close()


@pytest.fixture(autouse=True)
def _all_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)


def generate(defn: WorkerDefinition, input: Any, ctx: NodeContext | None = None) -> Any:
    return defn.nodes[INFER_GENERATE].handler(input, ctx or NodeContext("it-exec"))


def slot(address: str) -> dict[str, Any]:
    first: dict[str, Any] = httpx.get(address + "/slots", timeout=5).json()[0]
    return first


def wait_decoding(address: str, tokens: int = 2, timeout_s: float = 120) -> None:
    """Until the one slot has generated ``tokens`` tokens of the current reply."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = slot(address)
        if state["is_processing"] and state["next_token"][0]["n_decoded"] >= tokens:
            return
        time.sleep(0.05)
    raise AssertionError("the model never started generating")


def decoded(address: str) -> int:
    """Tokens the one slot has generated of its current reply (0 when idle)."""
    state = slot(address)
    return int(state["next_token"][0]["n_decoded"]) if state["is_processing"] else 0


def decoded_until_idle(address: str, timeout_s: float = EVENT_WAIT_S) -> int:
    """Polls until the slot is idle; returns the most tokens it was seen to have generated
    of the reply it was busy with. A server that ignored a cancel or a deadline would go
    on to ``maxTokens`` (400) before going idle; one that stopped is idle far sooner. A
    token count, not seconds: a busy machine slows every token alike."""
    peak = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = slot(address)
        if not state["is_processing"]:
            return peak
        peak = max(peak, int(state["next_token"][0]["n_decoded"]))
        time.sleep(0.02)
    raise AssertionError(f"the slot was still busy after {timeout_s} s")


def run_in_thread(defn: WorkerDefinition, input: Any, ctx: NodeContext) -> dict[str, Any]:
    """Start a call; the dict gets ``error`` (NodeError) or ``output`` and ``ended_at``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["output"] = generate(defn, input, ctx)
        except NodeError as exc:
            box["error"] = exc
        box["ended_at"] = time.monotonic()

    box["thread"] = threading.Thread(target=target, daemon=True)
    box["thread"].start()
    return box


# --- replies -------------------------------------------------------------------------------


def test_a_text_reply_repeatable_at_temperature_zero(
    definition: WorkerDefinition, model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    input = {
        "messages": [{"role": "user", "content": "Name the capital of France in one word."}],
        "maxTokens": 16,
        "temperature": 0,
    }
    out = generate(definition, input)
    assert out["finishReason"] == "stop"
    assert "Paris" in out["text"]
    assert out["model"] == model.model
    assert "json" not in out
    assert out["usage"]["promptTokens"] > 5
    assert 1 <= out["usage"]["completionTokens"] <= 16
    assert generate(definition, input)["text"] == out["text"]
    assert out["text"] not in caplog.text


def test_a_schema_reply_is_valid_json_of_the_schema(
    definition: WorkerDefinition, caplog: pytest.LogCaptureFixture
) -> None:
    # MEM-INF-2
    out = generate(
        definition,
        {"messages": PREFERENCE_MESSAGES, "responseSchema": PREFERENCE_SCHEMA, "maxTokens": 96},
    )
    assert out["finishReason"] == "stop"
    assert out["json"] == json.loads(out["text"])
    assert list(Draft202012Validator(PREFERENCE_SCHEMA).iter_errors(out["json"])) == []
    assert out["json"]["language"] == "German"
    assert out["text"] not in caplog.text


def test_a_reply_cut_by_max_tokens_is_invalid_output(
    definition: WorkerDefinition, caplog: pytest.LogCaptureFixture
) -> None:
    # MEM-INF-2
    with pytest.raises(NodeError) as info:
        generate(
            definition,
            {"messages": PREFERENCE_MESSAGES, "responseSchema": PREFERENCE_SCHEMA, "maxTokens": 4},
        )
    assert info.value.code == ErrorCode.INFER_INVALID_OUTPUT
    assert info.value.safe_message == (
        "the model's reply was cut off at maxTokens before it was complete"
    )
    assert "finish=length" in caplog.text  # it was the endpoint that said so


def test_no_prompt_or_reply_text_in_our_logs_or_the_servers(
    definition: WorkerDefinition, model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    out = generate(
        definition,
        {
            "messages": [
                {"role": "user", "content": f"Repeat exactly: {PROMPT_MARKER} {PROMPT_MARKER}"}
            ],
            "maxTokens": 24,
        },
    )
    assert out["text"]
    assert PROMPT_MARKER not in caplog.text
    assert out["text"] not in caplog.text
    server_log = model.log_path.read_text(errors="replace")
    assert "prompt eval time" in server_log  # the log is there and has the call's timings
    assert PROMPT_MARKER not in server_log


# --- cancellation and the deadline free the slot at once --------------------------------


def test_a_cancelled_call_frees_the_server_within_a_second(
    definition: WorkerDefinition, model: Any
) -> None:
    # MEM-INF-3
    cancel = CancelToken()
    box = run_in_thread(
        definition, {"messages": LONG, "maxTokens": 400}, NodeContext("c1", cancel=cancel)
    )
    wait_decoding(model.address)
    at_cancel = decoded(model.address)
    cancel.cancel()
    box["thread"].join(EVENT_WAIT_S)
    assert box["error"].code == ErrorCode.INFER_CANCELLED
    # the handler returned, and the server dropped the reply: it went idle within a few
    # tokens of the cancel (the 400-token reply would have run on to 400)
    assert decoded_until_idle(model.address) < at_cancel + STOP_TOKENS
    out = generate(definition, {"messages": [{"role": "user", "content": "Hi"}], "maxTokens": 1})
    assert out["usage"]["completionTokens"] == 1  # the next call is served: the slot is free


def test_the_deadline_stops_a_call_and_frees_the_server(
    definition: WorkerDefinition, model: Any
) -> None:
    # MEM-INF-3
    deadline = time.time() + 3.0  # 400 tokens take far longer; the prompt far less
    box = run_in_thread(
        definition, {"messages": LONG, "maxTokens": 400}, NodeContext("d1", deadline=deadline)
    )
    box["thread"].join(EVENT_WAIT_S)
    assert box["error"].code == ErrorCode.INFER_TIMEOUT
    assert box["error"].safe_message == "the call's deadline passed"
    assert decoded_until_idle(model.address) < 400 - STOP_TOKENS  # stopped, not run to 400


# --- the embedded default and a dying server ----------------------------------------------


def test_without_an_endpoint_the_local_model_starts_itself_and_a_kill_is_unavailable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    defn = create_infer_worker({"local": SETTINGS.model_dump()}, env={}, dotenv_path=None)
    handler = defn.nodes[INFER_GENERATE].handler
    try:
        out = generate(defn, {"messages": [{"role": "user", "content": "Hi"}], "maxTokens": 2})
        server = handler.local_server
        assert server is not None and server.healthy()
        assert out["model"] == server.model
        assert "started the local model" in caplog.text  # and says so
        box = run_in_thread(defn, {"messages": LONG, "maxTokens": 400}, NodeContext("k1"))
        wait_decoding(server.address)
        server.kill()  # SIGKILL mid-generation
        box["thread"].join(10)
        assert box["error"].code == ErrorCode.INFER_UNAVAILABLE
        assert box["error"].safe_message == (
            "the model endpoint closed the connection before the reply was complete"
        )
        with pytest.raises(NodeError) as info:  # the dead server: refused, not retried
            generate(defn, {"messages": [{"role": "user", "content": "Hi"}]})
        assert info.value.code == ErrorCode.INFER_UNAVAILABLE
    finally:
        assert defn.close is not None
        defn.close()
    assert handler.local_server is None
    assert server.process.poll() is not None


# --- through the fleet: a real `ditto-worker worker --nodes infer` on real Redis --------------


@pytest.fixture
def infer_worker(model: Any, redis_url: str, tmp_path: Path) -> Iterator[WorkerProc]:
    """``ditto-worker worker --nodes infer`` as an operator starts it: no pool or
    concurrency option (the kind's own: threads, 1), the endpoint from
    ``DITTO_WORKER_INFER_BASE_URL`` (what ``scripts/llm.sh start`` prints)."""
    env = {
        "DITTO_BROKER_URL": redis_url,
        "DITTO_RESULT_BACKEND": "",
        "DITTO_WORKER_INFER_BASE_URL": model.base_url,
        "DITTO_WORKER_INFER_MODEL": model.model,
    }
    args = ["--nodes", "infer", "--hostname", f"infer-{os.getpid()}@localhost"]
    worker = WorkerProc(tmp_path, args, env, "infer")
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()


def test_through_the_fleet_text_schema_cancel_and_deadline(
    model: Any, infer_worker: WorkerProc, redis_url: str, client: Any, tmp_path: Path
) -> None:
    # MEM-INF-1/2/3 through Redis: the caller sees what the handler answers
    status = subprocess.run(
        [sys.executable, "-m", "ditto_worker", "status", "--json", "--timeout", "5",
         "--broker", redis_url],
        cwd=tmp_path, env={**os.environ, "DITTO_BROKER_URL": ""},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    rows = {row["node"]: row for row in map(json.loads, status.stdout.splitlines())}
    # one worker, one call at a time: the local server has one slot
    assert rows["INFER.GENERATE"] == {"node": "INFER.GENERATE", "queue": "infer.generate",
                                      "backlog": 0, "workers": 1, "processes": 1}  # fmt: skip

    text = client.invoke(
        INFER_GENERATE,
        {"messages": [{"role": "user", "content": "Name the capital of France in one word."}],
         "maxTokens": 16, "temperature": 0},
        timeout=120,
    )  # fmt: skip
    assert text.status == "success", text.error
    assert isinstance(text.output, InferGenerateOutput)  # parsed by the client
    assert "Paris" in text.output.text and text.output.json_ is None
    assert text.output.finish_reason == "stop" and text.output.model == model.model

    ok = client.invoke(
        INFER_GENERATE,
        {"messages": PREFERENCE_MESSAGES, "responseSchema": PREFERENCE_SCHEMA, "maxTokens": 96},
        timeout=120,
    )
    assert ok.status == "success", ok.error
    assert ok.output.json_["language"] == "German"
    assert list(Draft202012Validator(PREFERENCE_SCHEMA).iter_errors(ok.output.json_)) == []
    assert ok.output.usage.completion_tokens > 0
    cut = client.invoke(
        INFER_GENERATE,
        {"messages": PREFERENCE_MESSAGES, "responseSchema": PREFERENCE_SCHEMA, "maxTokens": 4},
        timeout=120,
    )
    assert (cut.status, cut.error.code) == ("failed", ErrorCode.INFER_INVALID_OUTPUT)
    bad = client.invoke(INFER_GENERATE, {"messages": []}, timeout=30)
    assert (bad.status, bad.error.code) == ("failed", ErrorCode.INVALID_INPUT)

    # a client cancel reaches the worker, which closes the request: the slot is free again
    cancel = CancelToken()
    box: dict[str, Any] = {}
    call = threading.Thread(
        target=lambda: box.update(
            result=client.invoke(
                INFER_GENERATE, {"messages": LONG, "maxTokens": 400}, timeout=120, cancel=cancel
            )
        )
    )
    call.start()
    wait_decoding(model.address)
    at_cancel = decoded(model.address)
    cancel.cancel()
    call.join(EVENT_WAIT_S)
    result = box["result"]
    assert (result.status, result.error.code) == ("cancelled", ErrorCode.INFER_CANCELLED)
    # the cancel crossed Redis to the worker, which closed the request: the server stopped
    # within a few dozen tokens (the reply would have run on to 400)
    assert decoded_until_idle(model.address) < at_cancel + 2 * STOP_TOKENS
    # the next call is served, not queued behind the cancelled 400 tokens
    hi = client.invoke(INFER_GENERATE, {"messages": [{"role": "user", "content": "Hi"}],
                                        "maxTokens": 1}, timeout=EVENT_WAIT_S)  # fmt: skip
    assert hi.status == "success" and hi.output.usage.completion_tokens == 1

    # the caller's deadline travels with the call: the worker stops at it
    late = client.invoke(INFER_GENERATE, {"messages": LONG, "maxTokens": 400}, timeout=2.0)
    assert (late.status, late.error.code) == ("timeout", ErrorCode.INFER_TIMEOUT)
    assert decoded_until_idle(model.address) < 400 - STOP_TOKENS  # stopped, not run to 400
    log = infer_worker.log()
    assert "INFER.GENERATE" in log  # the worker logged its calls, without their text:
    assert "capital of France" not in log and "Paris" not in log and "German" not in log
