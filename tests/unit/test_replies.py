"""The result backend's one-pass JSON of a node reply (ditto_worker.fleet.replies)."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from kombu.serialization import dumps, loads, registry

from ditto_worker.contracts import MemoryItem, NodeResult, to_wire
from ditto_worker.fleet.redaction import Reply
from ditto_worker.fleet.replies import encode_result_meta, install_reply_encoder


def _result() -> NodeResult[list[MemoryItem]]:
    items = [
        MemoryItem(id="a", content={"text": "Grüße ☃", "n": 1.5}, metadata={"k": [1, None]}),
        MemoryItem(id="b", key="k2", content=None, operation_id="op-1"),
    ]
    return NodeResult[list[MemoryItem]](
        execution_id="e1", node="MEMORY.WRITE", status="success", output=items
    )


def _meta(result: object) -> dict[str, object]:
    # the shape Celery's Redis backend stores (celery.backends.base._get_result_meta)
    return {"status": "SUCCESS", "result": result, "traceback": None,
            "children": [["c1", None]], "date_done": "2026-12-01T21:00:00+00:00",
            "task_id": "e1"}  # fmt: skip


def test_a_reply_meta_is_the_same_json_as_kombus_encoder_writes() -> None:
    result = _result()
    fast = encode_result_meta(_meta(Reply(result)))
    slow = json.dumps(_meta(to_wire(result)))
    assert isinstance(fast, str)
    assert json.loads(fast) == json.loads(slow)
    assert "content" in json.loads(fast)["result"]["output"][1]  # null content is kept
    assert "key" not in json.loads(fast)["result"]["output"][0]  # unset optionals omitted
    assert json.loads(encode_result_meta(_meta(Reply(to_wire(result))))) == json.loads(slow)


@pytest.mark.parametrize(
    "data",
    [
        {"status": "SUCCESS", "result": 3, "when": dt.datetime(2026, 1, 2, 3, 4, 5)},
        {"result": Reply(_result()), "kwargs": {"at": dt.datetime(2026, 1, 2)}},
        [uuid.UUID(int=7), b"raw"],
        {"exc_type": "NodeFailed", "exc_message": [{"status": "failed"}]},
    ],
)
def test_anything_else_is_kombus_encoding_unchanged(data: object) -> None:
    # kombu's markers for datetimes, uuids and bytes survive: the fast path never sees them
    from kombu.utils.json import dumps as kombu_dumps

    assert encode_result_meta(data) == kombu_dumps(data)


def test_data_that_is_not_json_still_fails_as_kombu_fails() -> None:
    with pytest.raises(TypeError):
        encode_result_meta({"result": Reply(_result()), "other": object()})


def test_installed_as_kombus_json_codec_same_content_type_and_decoder() -> None:
    install_reply_encoder()
    install_reply_encoder()  # idempotent: never wraps itself
    codec = registry._encoders["json"]
    assert codec.encoder is encode_result_meta
    assert registry.type_to_name["application/json"] == "json"
    content_type, encoding, body = dumps(_meta(Reply(_result())), serializer="json")
    assert (content_type, encoding) == ("application/json", "utf-8")
    assert loads(body, content_type, encoding)["result"] == to_wire(_result())
    assert loads(dumps({"at": dt.datetime(2026, 1, 2)}, serializer="json")[2],
                 "application/json", "utf-8") == {"at": dt.datetime(2026, 1, 2)}  # fmt: skip
