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


def test_in_process_mode_uses_memory_transport_with_fast_polling() -> None:  # MEM-PY-7
    app = create_celery_app(FleetSettings())
    assert app.conf.broker_url.startswith("memory://")
    assert app.conf.result_backend == "cache+memory://"
    assert app.conf.broker_transport_options["polling_interval"] <= 0.01
