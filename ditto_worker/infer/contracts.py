"""Input and raw output of ``INFER.GENERATE`` (SPEC.md MEM-INF-1), as pydantic models.

Data only, no I/O. Wire names are camelCase (``responseSchema``, ``maxTokens``,
``finishReason``); validation is strict (``maxTokens: "5"`` is not an integer; MEM-PY-4).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_serializer
from pydantic.alias_generators import to_camel

from ditto_worker.contracts import JsonObject, ValidTextModel

__all__ = [
    "InferGenerateInput",
    "InferGenerateOutput",
    "InferMessage",
    "InferUsage",
]

MAX_MESSAGES = 1024
"""Most messages in one call."""


class _Wire(ValidTextModel):  # every string valid Unicode text (issue 13)
    model_config = ConfigDict(
        strict=True, frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class InferMessage(_Wire):
    """One chat message, passed to the endpoint as is."""

    role: Literal["system", "user", "assistant"] = Field(
        description="Who speaks: system (instructions), user or assistant (an earlier reply)."
    )
    content: str = Field(description="The message text (any length the model's context allows).")


class InferGenerateInput(_Wire):
    """``{messages, responseSchema?, maxTokens?, temperature?}``.

    ``maxTokens`` and ``temperature`` default to ``workers.infer.maxTokens`` /
    ``workers.infer.temperature``; ``maxTokens`` above ``workers.infer.maxTokensLimit`` is
    ``INVALID_INPUT``.
    """

    messages: list[InferMessage] = Field(
        min_length=1, max_length=MAX_MESSAGES, description="The conversation, oldest first."
    )
    response_schema: JsonObject | None = Field(
        default=None,
        description="A JSON Schema (draft 2020-12) the reply must match; sent as the "
        "endpoint's json_schema response format and checked again here (MEM-INF-2).",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="Most tokens in the reply (the endpoint's max_tokens)."
    )
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="Sampling temperature; 0 = greedy, repeatable."
    )


class InferUsage(_Wire):
    """Token counts the endpoint reported. Present only when it reported both; otherwise
    the output's ``usage`` is ``null`` (unknown is never 0; SPEC.md MEM-INF-1)."""

    prompt_tokens: int = Field(ge=0, description="Tokens of the prompt (messages + template).")
    completion_tokens: int = Field(ge=0, description="Tokens of the reply.")


class InferGenerateOutput(_Wire):
    """``{text, json?, model, finishReason, usage}`` (``usage`` ``null`` when the endpoint
    reported no token counts, or only one of the two).

    ``json`` is present exactly when the call had a ``responseSchema``: the parsed reply,
    valid against it. ``finishReason`` is the endpoint's (``stop``; ``length`` when
    ``maxTokens`` cut a text reply — a cut structured reply is ``INFER_INVALID_OUTPUT``
    instead); ``null`` when the endpoint said nothing (unknown, like ``usage``).
    """

    text: str = Field(description="The model's reply, as generated.")
    json_: Any = Field(default=None, alias="json", description="The parsed structured reply.")
    model: str = Field(description="The model that answered (as the endpoint names it).")
    finish_reason: str | None = Field(
        description="Why generation ended, as the endpoint said: stop, length, ...; null "
        "when it said nothing (unknown, never assumed stop)."
    )
    usage: InferUsage | None = Field(
        description="Token counts as the endpoint reported them; null when it reported none "
        "(unknown, not 0)."
    )

    @model_serializer(mode="wrap")
    def _omit_json_when_unset(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "json_" not in self.model_fields_set:
            data.pop("json", None)
            data.pop("json_", None)
        return data
