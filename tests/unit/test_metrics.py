"""Outcomes of task events for ``ditto_node_calls_total`` (ditto_worker.fleet.metrics)."""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker.fleet.metrics import outcome_of
from ditto_worker.fleet.redaction import Reply


@pytest.mark.parametrize(
    ("event", "outcome"),
    [
        ({"type": "task-succeeded", "result": repr(Reply({"node": "MEMORY.GET",
          "status": "success"}))}, ("success", "")),
        ({"type": "task-succeeded", "result": repr(Reply({"node": "MEMORY.GET",
          "status": "failed", "error": {"code": "INVALID_INPUT", "message": "m"}}))},
         ("failed", "INVALID_INPUT")),
        ({"type": "task-succeeded", "result": repr(Reply({"node": "X.Y", "status": "timeout",
          "error": {"code": "X_TIMEOUT", "message": "m"}}, show=True))}, ("timeout", "X_TIMEOUT")),
        ({"type": "task-failed", "exception": "NodeFailed(MEMORY.WRITE failed CONFLICT)"},
         ("failed", "CONFLICT")),
        ({"type": "task-failed", "exception": "NodeFailed(INFER.GENERATE cancelled "
          "INFER_CANCELLED)"}, ("cancelled", "INFER_CANCELLED")),
        ({"type": "task-failed", "exception": "TimeLimitExceeded(12.0)"},
         ("failed", "TimeLimitExceeded")),
        ({"type": "task-failed", "exception": "???"}, ("failed", "TaskFailed")),
        ({"type": "task-revoked", "expired": True}, ("revoked", "EXPIRED")),
        ({"type": "task-rejected"}, ("rejected", "REJECTED")),
        ({"type": "task-received"}, None),
        ({"type": "task-started"}, None),
    ],
)  # fmt: skip
def test_outcome_of_events(event: dict[str, Any], outcome: tuple[str, str] | None) -> None:
    assert outcome_of(event) == outcome


def test_a_batch_counts_each_of_its_calls() -> None:  # issue 36 item 5: calls, not messages
    from ditto_worker.contracts import NodeResult
    from ditto_worker.fleet.batch import BatchReply
    from ditto_worker.fleet.metrics import outcomes_of

    results = [
        NodeResult.failure("a", "MEMORY.GET", "INVALID_INPUT", "secret-text"),
        NodeResult.failure("b", "MEMORY.GET", "MEMORY_TIMEOUT", "m", "timeout"),
        NodeResult.failure("c", "MEMORY.GET", "MEMORY_CANCELLED", "m", "cancelled"),
    ]
    shown = repr(BatchReply("MEMORY.GET", results))
    assert "secret" not in shown  # no message, no content
    event = {"type": "task-succeeded", "result": shown}
    assert outcomes_of(event) == [
        ("failed", "INVALID_INPUT"), ("timeout", "MEMORY_TIMEOUT"),
        ("cancelled", "MEMORY_CANCELLED"),
    ]  # fmt: skip
    one = {"type": "task-failed", "exception": "NodeFailed(MEMORY.WRITE failed CONFLICT)"}
    assert outcomes_of(one) == [("failed", "CONFLICT")]
    assert outcomes_of({"type": "task-started"}) == []
