"""The Celery app's wiring: one queue per node, JSON only, no missing-queue creation."""

from __future__ import annotations

from ditto_worker.config import FleetSettings
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet.celery_app import create_celery_app, fleet_nodes


def test_one_queue_per_node_and_routes_by_task_name() -> None:
    # MEM-RT-2: every node of every installed worker kind, its own lower-case queue
    app = create_celery_app(FleetSettings(broker_url="redis://127.0.0.1:1/0"))
    queues = {q.name: q for q in app.conf.task_queues}
    nodes = fleet_nodes()
    assert set(queues) == {node.lower() for node in nodes}
    assert {"RETRIEVAL.SEARCH", "CONTEXT.UPDATE", "CONTEXT.LOAD", *NODE_QUEUES} <= set(nodes)
    assert NODE_QUEUES == {
        "MEMORY.GET": "memory.get",
        "MEMORY.QUERY": "memory.query",
        "MEMORY.SEARCH": "memory.search",
        "MEMORY.WRITE": "memory.write",
        "MEMORY.UPDATE": "memory.update",
        "MEMORY.DELETE": "memory.delete",
    }
    for node in nodes:
        assert app.amqp.router.route({}, node)["queue"].name == node.lower()


def test_an_app_declares_only_the_nodes_it_is_given() -> None:
    app = create_celery_app(FleetSettings(broker_url="redis://127.0.0.1:1/0"), nodes=["ECHO.SAY"])
    assert [q.name for q in app.conf.task_queues] == ["echo.say"]


def test_json_only_and_events_on() -> None:
    app = create_celery_app(FleetSettings(broker_url="redis://127.0.0.1:1/0"))
    assert app.conf.accept_content == ["json"]
    assert app.conf.result_accept_content == ["json"]
    assert app.conf.task_serializer == app.conf.result_serializer == "json"
    assert app.conf.task_create_missing_queues is False
    assert app.conf.worker_send_task_events is True
    assert app.conf.result_backend == "redis://127.0.0.1:1/0"


def test_task_events_can_be_turned_off() -> None:
    # fleet.taskEvents: false sends neither the client's task-sent nor the worker's events
    fleet = FleetSettings(broker_url="redis://127.0.0.1:1/0", task_events=False)
    app = create_celery_app(fleet)
    assert app.conf.worker_send_task_events is False
    assert app.conf.task_send_sent_event is False
    assert FleetSettings().task_events is True


def test_in_process_mode_uses_memory_transport_with_fast_polling() -> None:  # MEM-PY-7
    app = create_celery_app(FleetSettings())
    assert app.conf.broker_url.startswith("memory://")
    assert app.conf.result_backend == "cache+memory://"
    assert app.conf.broker_transport_options["polling_interval"] <= 0.01


def test_redis_and_sentinel_brokers_use_the_guarded_transports() -> None:
    """A Redis restart or a Sentinel failover must never stop a worker (fleet/transport.py):
    both broker kinds go through the guarded channels; tools may ask for kombu's own."""
    cases = {
        "redis://127.0.0.1:6379/0": "ditto_worker.fleet.transport:Transport",
        "rediss://127.0.0.1:6380/0": "ditto_worker.fleet.transport:Transport",
        "sentinel://127.0.0.1:26379/0;sentinel://127.0.0.1:26380/0": (
            "ditto_worker.fleet.transport:SentinelTransport"
        ),
    }
    for url, transport in cases.items():
        fleet = FleetSettings(broker_url=url, result_backend="redis://127.0.0.1:6379/1",
                              sentinel_master_name="m")  # fmt: skip
        assert create_celery_app(fleet).conf.broker_transport == transport, url
        plain = create_celery_app(fleet, guarded_transport=False)
        assert plain.conf.broker_transport in (None, ""), url


def test_the_guarded_channels_refuse_a_closed_connection_as_a_connection_error() -> None:
    """kombu rebuilt a pool from a detached connection and raised AttributeError (an
    unrecoverable error to Celery); the guard makes it a Redis ConnectionError."""
    import pytest
    from redis.exceptions import ConnectionError as RedisConnectionError

    from ditto_worker.fleet.transport import Channel, SentinelChannel

    for kind in (Channel, SentinelChannel):
        channel = kind.__new__(kind)  # no broker: only the guard is under test
        channel.connection = None
        with pytest.raises(RedisConnectionError, match="closed"):
            channel._connparams()
