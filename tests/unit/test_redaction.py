"""Redaction pieces without a broker: the task reply, argument reprs, the log filter."""

from __future__ import annotations

import logging

import pytest
from celery.utils.saferepr import saferepr
from kombu.utils.json import dumps, loads

from ditto_worker.fleet.redaction import (
    RedactingFilter,
    Reply,
    args_repr,
    input_repr,
    install_redaction,
)

M = "SECRET-MARKER"
WIRE = {"executionId": "e1", "node": "MEMORY.GET", "status": "success",
        "output": [{"id": "1", "content": M}]}  # fmt: skip


def test_reply_shows_a_summary_and_serializes_the_whole_node_result() -> None:
    reply = Reply(WIRE)
    assert saferepr(reply, 1024) == "<NodeResult MEMORY.GET success>"  # what Celery logs
    assert loads(dumps(reply)) == WIRE  # what the result backend stores
    failed = Reply({"node": "MEMORY.QUERY", "status": "failed",
                    "error": {"code": "INVALID_INPUT", "message": M}})  # fmt: skip
    assert repr(failed) == "<NodeResult MEMORY.QUERY failed INVALID_INPUT>"
    assert M in repr(Reply(WIRE, show=True))


def test_argument_reprs() -> None:
    assert args_repr(True) == {}
    assert args_repr(False)["kwargsrepr"] == "{'input': <redacted>}"
    assert input_repr(42) == "{'input': <redacted, message 42 bytes>}"


@pytest.mark.parametrize(
    ("template", "args"),
    [
        ("TaskPool: Apply %s (args:%s kwargs:%s)", ("fn", f"({M!r},)", "{}")),
        ("Received unregistered task of type %s.\nbody:\n%s\n%s\n%s",
         ("'X.Y'", M, "{}", "{}")),
        ("Received invalid task message: %s\nbody:\n%s", ("bad", M)),
        ("Can't decode message body: %r [type:%r encoding:%r headers:%s]\n\nbody: %s",
         ("err", "json", "utf-8", "{}", M)),
        ("Received and deleted unknown message.  Wrong destination?!?\n\n%s", (M,)),
    ],
)  # fmt: skip
def test_filter_drops_message_bodies(template: str, args: tuple[str, ...]) -> None:
    record = logging.LogRecord("celery.pool", logging.ERROR, __file__, 1, template, args, None)
    assert RedactingFilter().filter(record)
    assert M not in record.getMessage()


def test_install_redaction_is_idempotent_and_reversible() -> None:
    logger = logging.getLogger("celery.pool")
    install_redaction(False)
    install_redaction(False)
    assert sum(isinstance(f, RedactingFilter) for f in logger.filters) == 1
    install_redaction(True)
    assert not any(isinstance(f, RedactingFilter) for f in logger.filters)
    install_redaction(False)
