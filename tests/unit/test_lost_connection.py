"""A task that lost the fleet's own connection is FLEET_UNAVAILABLE, not a node failure
(issue 37 item 5: in a Redis failover the worker ran a write but could not store its
result; the caller must see a retryable fleet error, not MEMORY_BACKEND_ERROR)."""

from __future__ import annotations

import pytest
import redis
from kombu.exceptions import OperationalError
from redis.sentinel import MasterNotFoundError

from ditto_worker.fleet.failures import LOST_CONNECTION, lost_connection


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError("closed"),
        redis.exceptions.TimeoutError(),
        MasterNotFoundError("none"),
        OperationalError("down"),
        ConnectionResetError(),
        BrokenPipeError(),
        ConnectionRefusedError(),
    ],  # fmt: skip
)
def test_connection_errors_are_lost_connections(error: BaseException) -> None:
    assert lost_connection(error)
    stored = {"exc_type": type(error).__name__, "exc_module": type(error).__module__}
    assert lost_connection(stored)  # as Celery's JSON result backend stores it


@pytest.mark.parametrize(
    "result",
    [
        ValueError("x"),
        RuntimeError(),
        KeyError("k"),
        None,
        "text",
        3,
        {"exc_type": "NodeFailed", "exc_module": "ditto_worker.fleet.failures"},
        {"exc_type": "ConnectionError", "exc_module": "somewhere.else"},
        {"exc_type": "ValueError", "exc_module": "builtins"},
    ],  # fmt: skip
)
def test_other_failures_are_not(result: object) -> None:
    assert not lost_connection(result)


def test_a_stored_failure_maps_to_fleet_unavailable() -> None:
    from ditto_worker.config import FleetSettings
    from ditto_worker.errors import ErrorCode
    from ditto_worker.fleet.celery_app import create_celery_app
    from ditto_worker.fleet.client import DittoClient
    from ditto_worker.runtime.calls import Call, CallOptions

    client = DittoClient(create_celery_app(FleetSettings()))  # in-process: nothing sent

    def call(eid: str) -> Call:  # a call of the one invoke path, as the client sends it
        made = client.call_of("MEMORY.WRITE", {}, CallOptions(execution_id=eid))
        assert isinstance(made, Call)
        return made

    try:
        meta = {"status": "FAILURE",
                "result": {"exc_type": "ConnectionError", "exc_module": "redis.exceptions",
                           "exc_message": ["Connection closed by server."]}}  # fmt: skip
        lost = client._from_meta(meta, call("e1"), cancelled=False)
        assert lost.status == "failed" and lost.error is not None
        assert (lost.error.code, lost.error.message) == (
            ErrorCode.FLEET_UNAVAILABLE,
            LOST_CONNECTION,
        )
        other = {
            "status": "FAILURE",
            "result": {"exc_type": "ValueError", "exc_module": "builtins"},
        }
        failed = client._from_meta(other, call("e2"), cancelled=False)
        assert failed.error is not None and failed.error.code == ErrorCode.MEMORY_BACKEND_ERROR
    finally:
        client.close()
