"""The result backend's JSON of a node reply, encoded in one pass (issue 28 item 4).

A node task returns a :class:`~ditto_worker.fleet.redaction.Reply` holding its NodeResult
model. Celery's result backend encodes ``{"status", "result": <reply>, "traceback",
"children", "date_done", "task_id"}`` with kombu's ``json`` codec, whose stdlib encoder
walks the reply's wire JSON — a ``model_dump`` of the whole NodeResult made first: for a
WRITE of 1,000 memories about 5 ms of CPU in the worker (2.2 ms ``model_dump``, 2.9 ms
``json.dumps``), which the direct SDK never pays.

:func:`install_reply_encoder` registers kombu's ``json`` codec again — same name, same
content type (``application/json``, UTF-8), same decoder — with an encoder that writes
such a meta with pydantic-core straight from the model (its own serializer: the same
aliases and omitted optionals as :func:`~ditto_worker.contracts.to_wire`), about 1.2 ms
for the same reply, and hands anything else to the encoder it replaced, unchanged: only a
dict whose ``result`` is a ``Reply`` and whose other values are plain strings, numbers,
``None`` or lists of them (Celery's own fields) takes the fast path; one that pydantic-core
cannot write goes the old way too. The bytes on the wire are JSON either way, so every
reader (the client's listener, Celery's ``AsyncResult``, Flower) decodes them as before.
SPEC.md: only JSON crosses the broker; ``result_serializer`` stays ``json``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kombu.serialization import registry
from kombu.utils import json as kombu_json
from pydantic_core import PydanticSerializationError, to_json

from ditto_worker.fleet.batch import BatchReply
from ditto_worker.fleet.redaction import Reply

__all__ = ["encode_result_meta", "install_reply_encoder"]

_CONTENT_TYPE = "application/json"
_previous: Callable[[Any], Any] = kombu_json.dumps
"""The ``json`` encoder :func:`install_reply_encoder` replaced (kombu's by default)."""


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is a string, number, bool, ``None`` or a shallow list of them."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) in (list, tuple) and depth < 4:
        return all(_plain(item, depth + 1) for item in value)
    return False


def _reply_payload(value: Any) -> Any:
    """pydantic-core's fallback: a Reply is its NodeResult (or wire JSON); nothing else is
    written by the fast path."""
    if isinstance(value, Reply):
        return value.result
    if isinstance(value, BatchReply):  # a batch's NodeResults, in call order
        return value.results
    raise TypeError(f"{type(value).__name__} is not written by the reply encoder")


def encode_result_meta(data: Any) -> Any:
    """kombu's ``json`` encoder, with a one-pass path for a node reply's result meta.

    Args:
        data: what Celery encodes (a result meta, a task body, an event …).

    Returns:
        JSON text (``str``), as kombu's encoder returns.

    Raises:
        TypeError / ValueError: whatever the replaced encoder raises for data that is not
            JSON (kombu turns it into ``EncodeError``).
    """
    if type(data) is dict and isinstance(data.get("result"), Reply | BatchReply):
        if all(_plain(v) for k, v in data.items() if k != "result"):
            try:
                return to_json(data, by_alias=True, fallback=_reply_payload).decode()
            except (PydanticSerializationError, TypeError, ValueError):
                pass  # not plain JSON after all: the replaced encoder decides
    return _previous(data)


def install_reply_encoder() -> None:
    """Register :func:`encode_result_meta` as kombu's ``json`` encoder in this process
    (idempotent; the decoder and content type stay kombu's)."""
    global _previous
    codec = registry._encoders.get("json")  # kombu's codec tuple: (type, encoding, encoder)
    current = codec[2] if codec is not None else kombu_json.dumps
    if current is encode_result_meta:
        return
    _previous = current
    decoder = registry._decoders.get(_CONTENT_TYPE, kombu_json.loads)
    registry.register(  # type: ignore[no-untyped-call]
        "json", encode_result_meta, decoder, _CONTENT_TYPE, "utf-8"
    )
