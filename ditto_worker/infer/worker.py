"""The INFER worker: ``INFER.GENERATE`` on the queue ``infer.generate`` (SPEC.md MEM-INF).

``create_infer_worker(settings)`` returns the worker definition the runtime serves
(MEM-RT-1). Its one handler, :class:`InferGenerate`, is
``(input, ctx) -> {text, json?, model, finishReason, usage: {promptTokens,
completionTokens} | null}`` (``null`` when the endpoint reported no usage: unknown is
never 0; MEM-INF-1):

1. the input is validated before any I/O (``INVALID_INPUT`` naming the field; a
   ``responseSchema`` must itself be a valid JSON Schema);
2. one streamed chat completion goes to the configured endpoint
   (:class:`~ditto_worker.infer.endpoint.ChatEndpoint`); with ``responseSchema`` the
   request asks for ``response_format: {type: json_schema, json_schema: {schema,
   strict: true}}``;
3. a structured reply is parsed and validated with ``jsonschema``; not JSON, not
   matching, or cut off (``finishReason: length``) is ``INFER_INVALID_OUTPUT``
   (MEM-INF-2) — its message names the schema rule that failed, never the reply.

Cancellation (``ctx.cancel``) and the deadline (``ctx.deadline``, else
``workers.infer.requestTimeoutS``) shut the request's socket down, so the model server
frees its slot; the call ends ``INFER_CANCELLED`` / ``INFER_TIMEOUT`` (the runtime's codes
for the kind; MEM-RT-4). Endpoint faults are ``INFER_UNAVAILABLE``, never retried
(MEM-INF-3, MEM-ERR-5). Logs carry the execution id, token counts (``unknown`` when the
endpoint reported none), timings, codes — never messages, replies or the key.

With no endpoint configured (``workers.infer.baseUrl`` and
``DITTO_WORKER_INFER_BASE_URL`` empty) the packaged local model
(:mod:`ditto_worker.infer.local`) is started by the definition's ``open`` hook (a worker
process, before it announces ready) or else by the first call, with a warning saying so;
the definition's ``close`` stops it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ditto_worker.config.infer import InferSettings, load_infer_settings
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.infer.contracts import InferGenerateInput, InferGenerateOutput
from ditto_worker.infer.endpoint import CallAbort, CallAborted, ChatEndpoint, ChatReply
from ditto_worker.runtime import NodeContext, NodeSpec, WorkerDefinition

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig

__all__ = [
    "INFER_GENERATE",
    "InferGenerate",
    "create_infer_worker",
    "from_config",
]

logger = logging.getLogger(__name__)

INFER_GENERATE = "INFER.GENERATE"
"""The node id (queue ``infer.generate``)."""

EndpointFactory = Callable[[], tuple[ChatEndpoint, str]]
"""``() -> (endpoint, default model name)``; called once, on the first call."""


def _invalid_input(message: str) -> NodeError:
    return NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: {message}")


def _invalid_output(message: str) -> NodeError:
    return NodeError(ErrorCode.INFER_INVALID_OUTPUT, message)


def _parse(raw: Any, settings: InferSettings) -> InferGenerateInput:
    """Validate the input strictly (MEM-PY-4); messages name fields, never values."""
    from pydantic import ValidationError

    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)
    try:
        parsed = InferGenerateInput.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        parts = [
            "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
            + f": {e['msg']}"
            for e in errors[:3]
        ]
        raise _invalid_input("; ".join(parts) or "input") from None
    if parsed.max_tokens is not None and parsed.max_tokens > settings.max_tokens_limit:
        raise _invalid_input(
            f"maxTokens: at most {settings.max_tokens_limit} (workers.infer.maxTokensLimit)"
        )
    if parsed.response_schema is not None:
        _check_schema(parsed.response_schema)
    return parsed


def _check_schema(schema: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        raise _invalid_input(
            f"responseSchema: not a valid JSON Schema (draft 2020-12) at {where}: "
            f"'{exc.validator}' rule"
        ) from None


def _check_reply(text: str, schema: dict[str, Any]) -> Any:
    """The parsed reply, valid against ``schema``.

    Raises:
        NodeError: ``INFER_INVALID_OUTPUT`` naming the schema rule (path in the schema,
            keyword) that failed; never a part of the reply.
    """
    from jsonschema import Draft202012Validator

    try:
        value = json.loads(text)
    except ValueError:
        raise _invalid_output("the model's reply is not valid JSON") from None
    error = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    if error is not None:
        rule = "/".join(str(p) for p in error.schema_path) or "(root)"
        raise _invalid_output(
            f"the model's reply does not match responseSchema (rule {rule})"
        ) from None
    return value


class InferGenerate:
    """The ``INFER.GENERATE`` handler (see the module docstring).

    Args:
        settings: ``workers.infer`` (with env and ``.env`` applied).
        endpoint_factory: builds the endpoint on the first call (lazily: building a
            definition opens nothing, MEM-RT-5); the default uses ``settings.baseUrl`` or
            starts the local model.
    """

    def __init__(
        self, settings: InferSettings, endpoint_factory: EndpointFactory | None = None
    ) -> None:
        self._settings = settings
        self._factory = endpoint_factory or self._default_endpoint
        self._lock = threading.Lock()
        self._endpoint: tuple[ChatEndpoint, str] | None = None
        self._local: Any = None

    def __call__(self, input: Any, ctx: NodeContext) -> dict[str, Any]:
        """Run one call.

        Returns:
            ``InferGenerateOutput`` as wire JSON (``{text, json?, model, finishReason,
            usage}``).

        Raises:
            NodeError: ``INVALID_INPUT`` (before any I/O), ``INFER_UNAVAILABLE``,
                ``INFER_INVALID_OUTPUT``, ``INFER_CANCELLED``, ``INFER_TIMEOUT``.
        """
        request = _parse(input, self._settings)
        self._check_stopped(ctx)
        endpoint, default_model = self._get_endpoint()
        body = self._body(request, default_model)
        started = time.monotonic()
        reply = self._run(endpoint, body, ctx)
        elapsed_ms = (time.monotonic() - started) * 1000
        logger.info(
            "%s %s: finish=%s prompt_tokens=%s completion_tokens=%s latency_ms=%.0f",
            INFER_GENERATE, ctx.execution_id, reply.finish_reason or "unknown",
            _known(reply.prompt_tokens), _known(reply.completion_tokens), elapsed_ms,
        )  # fmt: skip
        return self._output(request, reply, default_model)

    @property
    def local_server(self) -> Any:
        """The :class:`~ditto_worker.infer.local.LocalModelServer` this handler started
        (no endpoint configured), or ``None``."""
        return self._local

    # --- steps ---

    @staticmethod
    def _check_stopped(ctx: NodeContext) -> None:
        if ctx.cancel.cancelled:
            raise NodeError(ErrorCode.INFER_CANCELLED, "the call was cancelled")
        if ctx.expired:
            raise NodeError(ErrorCode.INFER_TIMEOUT, "the call's deadline passed")

    def _body(self, request: InferGenerateInput, default_model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messages": [m.model_dump() for m in request.messages],
            "max_tokens": request.max_tokens or self._settings.max_tokens,
            "temperature": (
                self._settings.temperature if request.temperature is None else request.temperature
            ),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if default_model:
            body["model"] = default_model
        if request.response_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": "response",
                    "schema": request.response_schema,
                    "strict": True,
                },
            }
        return body

    def _run(self, endpoint: ChatEndpoint, body: dict[str, Any], ctx: NodeContext) -> ChatReply:
        abort = CallAbort()
        limit_s = self._settings.request_timeout_s
        reason = "request_timeout"
        remaining = ctx.remaining_s
        if remaining is not None and remaining <= limit_s:
            limit_s, reason = max(remaining, 0.0), "deadline"
        timer = threading.Timer(limit_s, abort.abort, args=(reason,))
        timer.daemon = True
        unregister = ctx.cancel.on_cancel(lambda: abort.abort("cancelled"))
        timer.start()
        try:
            return endpoint.chat(body, abort)
        except CallAborted as stopped:
            raise self._stopped_error(stopped.reason) from None
        finally:
            timer.cancel()
            unregister()

    def _stopped_error(self, reason: str) -> NodeError:
        logger.info("%s stopped: %s", INFER_GENERATE, reason)
        if reason == "cancelled":
            return NodeError(ErrorCode.INFER_CANCELLED, "the call was cancelled")
        if reason == "deadline":
            return NodeError(ErrorCode.INFER_TIMEOUT, "the call's deadline passed")
        return NodeError(
            ErrorCode.INFER_UNAVAILABLE,
            f"the model endpoint did not finish within {self._settings.request_timeout_s:g} s "
            "(workers.infer.requestTimeoutS)",
        )

    @staticmethod
    def _output(
        request: InferGenerateInput, reply: ChatReply, default_model: str
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "text": reply.text,
            "model": reply.model or default_model,
            "finishReason": reply.finish_reason or None,
            "usage": _usage(reply),
        }
        if request.response_schema is not None:
            if reply.finish_reason == "length":
                raise _invalid_output(
                    "the model's reply was cut off at maxTokens before it was complete"
                )
            fields["json"] = _check_reply(reply.text, request.response_schema)
        dumped: dict[str, Any] = InferGenerateOutput.model_validate(fields).model_dump(
            mode="json", by_alias=True
        )
        return dumped

    # --- the endpoint ---

    def _get_endpoint(self) -> tuple[ChatEndpoint, str]:
        with self._lock:
            if self._endpoint is None:
                self._endpoint = self._factory()
            return self._endpoint

    def _default_endpoint(self) -> tuple[ChatEndpoint, str]:
        s = self._settings
        base_url, model = s.base_url, s.model
        if not base_url:
            base_url, model = self._start_local()
        endpoint = ChatEndpoint(
            base_url, api_key=s.api_key, connect_timeout_s=s.connect_timeout_s,
            read_timeout_s=s.read_timeout_s,
        )  # fmt: skip
        return endpoint, model

    def _start_local(self) -> tuple[str, str]:
        if not self._settings.local.auto_start:
            raise NodeError(
                ErrorCode.INFER_UNAVAILABLE,
                "no model endpoint is configured (workers.infer.baseUrl or "
                "DITTO_WORKER_INFER_BASE_URL) and workers.infer.local.autoStart is false",
            )
        from ditto_worker.infer.local import LocalModelError, LocalModelServer

        try:
            self._local = LocalModelServer.start(self._settings.local)
        except LocalModelError as exc:
            logger.warning("INFER: the local model did not start: %s", exc)
            raise NodeError(
                ErrorCode.INFER_UNAVAILABLE,
                f"no model endpoint is configured and the local model did not start: {exc}",
            ) from None
        logger.warning(
            "INFER: no model endpoint configured (workers.infer.baseUrl / "
            "DITTO_WORKER_INFER_BASE_URL); started the local model %s at %s (pid %d, log %s)",
            self._local.model, self._local.base_url, self._local.pid, self._local.log_path,
        )  # fmt: skip
        return self._local.base_url, self._settings.model or self._local.model

    def open(self) -> None:
        """Build the endpoint now (the definition's ``open`` hook: a worker process runs it
        before it announces ready). With no endpoint configured this starts the local
        model, so the first call does not wait for it; with one, the endpoint is asked for
        ``/models`` once and a warning is logged when no server answers (calls then fail
        ``INFER_UNAVAILABLE`` until one does: a model server may start after its workers).

        Raises:
            NodeError: ``INFER_UNAVAILABLE`` when the local model cannot start.
        """
        endpoint, _ = self._get_endpoint()
        if self._local is None and not endpoint.probe(self._settings.connect_timeout_s):
            logger.warning(
                "INFER: the model endpoint (workers.infer.baseUrl / "
                "DITTO_WORKER_INFER_BASE_URL) is not reachable yet; calls fail "
                "INFER_UNAVAILABLE until it is"
            )

    def close(self) -> None:
        """Close the HTTP client and stop a local model this handler started."""
        with self._lock:
            endpoint, self._endpoint = self._endpoint, None
            local, self._local = self._local, None
        if endpoint is not None:
            endpoint[0].close()
        if local is not None:
            local.stop()


def create_infer_worker(
    settings: InferSettings | Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    dotenv_path: str | None = ".env",
    endpoint_factory: EndpointFactory | None = None,
) -> WorkerDefinition:
    """The INFER worker definition: ``INFER.GENERATE`` (SPEC.md MEM-INF, MEM-RT-1).

    Args:
        settings: ``workers.infer`` (an :class:`InferSettings`, the raw mapping, or
            ``None`` for the defaults); the environment and ``.env`` apply on top.
        env: the environment (``os.environ`` when ``None``).
        dotenv_path: the ``.env`` file to read ``DITTO_WORKER_INFER_*`` from, or ``None``.
        endpoint_factory: ``() -> (ChatEndpoint, model)`` instead of the configured
            endpoint (tests).

    Returns:
        ``WorkerDefinition("INFER", {INFER.GENERATE}, concurrency=workers.infer.concurrency)``;
        its ``open`` (run by a worker process before it announces ready) builds the
        endpoint or starts the local model, its ``close`` closes the HTTP client and stops
        a local model it started. Nothing connects before ``open`` or the first call.

    Raises:
        ConfigError: invalid settings (an ``apiKey`` in ``ditto.yaml`` included).
    """
    resolved = load_infer_settings(settings, env, dotenv_path)
    handler = InferGenerate(resolved, endpoint_factory)
    spec = NodeSpec(INFER_GENERATE, handler, output=InferGenerateOutput, input=InferGenerateInput)
    return WorkerDefinition.of(
        "INFER", [spec], concurrency=resolved.concurrency, close=handler.close,
        open=handler.open,
    )  # fmt: skip


def from_config(config: RuntimeConfig) -> WorkerDefinition:
    """The INFER worker of a worker process, from ``workers.infer`` in ``ditto.yaml`` (entry
    point ``infer`` of the group ``ditto_worker.workers``); nothing connects or starts
    before its ``open`` hook or the first call."""
    return create_infer_worker(config.infer_worker)


def _known(count: int | None) -> str:
    """A count for a log line: the number, or ``unknown`` (never a made-up 0)."""
    return "unknown" if count is None else str(count)


def _usage(reply: ChatReply) -> dict[str, int] | None:
    """``{promptTokens, completionTokens}`` when the endpoint reported both, else ``None``."""
    if reply.prompt_tokens is None or reply.completion_tokens is None:
        return None
    return {"promptTokens": reply.prompt_tokens, "completionTokens": reply.completion_tokens}
