"""``ditto-worker status`` without a broker: the table from inspect replies and backlog."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from ditto_worker.cli.commands import app
from ditto_worker.config import FleetSettings
from ditto_worker.fleet import monitor, status
from ditto_worker.fleet.celery_app import create_celery_app
from ditto_worker.fleet.status import (
    QueueStatus,
    app_nodes,
    build_rows,
    queue_consumers,
    render_table,
    worker_pool_sizes,
)

ACTIVE_QUEUES = {
    "reads.1@host": [{"name": "memory.get", "exchange": {}}, {"name": "memory.query"}],
    "reads.2@host": [{"name": "memory.get"}, {"name": "memory.query"}],
    "writes.1@host": [{"name": "memory.write"}, {"name": "memory.update"}],
    "odd@host": None,  # a worker replying nothing usable
}
STATS = {
    "reads.1@host": {"pool": {"max-concurrency": 4, "processes": [1, 2, 3, 4]}},
    "reads.2@host": {"pool": {"max-concurrency": 8}},
    "writes.1@host": {"pool": {"max-concurrency": 2}},
    "odd@host": {"pool": {"max-concurrency": True}},
}


def test_queue_consumers_groups_workers_by_queue() -> None:
    consumers = queue_consumers(ACTIVE_QUEUES)
    assert consumers == {
        "memory.get": ["reads.1@host", "reads.2@host"],
        "memory.query": ["reads.1@host", "reads.2@host"],
        "memory.write": ["writes.1@host"],
        "memory.update": ["writes.1@host"],
    }
    assert queue_consumers(None) == {}  # no worker answered


def test_worker_pool_sizes_skips_replies_without_a_size() -> None:
    assert worker_pool_sizes(STATS) == {"reads.1@host": 4, "reads.2@host": 8, "writes.1@host": 2}
    assert worker_pool_sizes(None) == {}


def test_build_rows_one_per_node_in_node_order() -> None:
    nodes = app_nodes(create_celery_app(FleetSettings(broker_url="redis://127.0.0.1:1/0")))
    rows = build_rows(
        {"memory.get": 3, "memory.search": 7},
        queue_consumers(ACTIVE_QUEUES),
        worker_pool_sizes(STATS),
        nodes,
    )
    assert [r.node for r in rows] == list(nodes)
    assert {"MEMORY.GET", "RETRIEVAL.SEARCH", "CONTEXT.UPDATE"} <= set(nodes)
    by_node = {r.node: r for r in rows}
    assert by_node["MEMORY.GET"] == QueueStatus("MEMORY.GET", "memory.get", 3, 2, 12)
    assert by_node["MEMORY.SEARCH"] == QueueStatus("MEMORY.SEARCH", "memory.search", 7, 0, 0)
    assert by_node["MEMORY.WRITE"].workers == 1 and by_node["MEMORY.WRITE"].processes == 2
    assert by_node["MEMORY.DELETE"] == QueueStatus("MEMORY.DELETE", "memory.delete", 0, 0, 0)


def test_render_table_aligns_columns() -> None:
    rows = [
        QueueStatus("MEMORY.GET", "memory.get", 12345, 2, 12),
        QueueStatus("MEMORY.DELETE", "memory.delete", 0, 0, 0),
    ]
    assert render_table(rows) == (
        "node           queue            backlog  workers  processes\n"
        "MEMORY.GET     memory.get         12345        2         12\n"
        "MEMORY.DELETE  memory.delete          0        0          0\n"
    )
    assert render_table([]).count("\n") == 1  # the header only
    wide = render_table([*rows, QueueStatus("RETRIEVAL.SEARCH", "retrieval.search", 0, 1, 2)])
    assert "RETRIEVAL.SEARCH  retrieval.search  " in wide  # issue 13: never run together
    assert len({len(line) for line in wide.splitlines()}) == 1  # still aligned
    assert rows[0].to_dict() == {
        "node": "MEMORY.GET",
        "queue": "memory.get",
        "backlog": 12345,
        "workers": 2,
        "processes": 12,
    }


def test_a_pool_size_not_reported_is_unknown_not_zero() -> None:
    # issue 23 item 3: a consuming worker that did not answer ``stats`` (or answered
    # without a size) makes ``processes`` unknown — never a made-up 0 or a partial sum
    consumers = {"memory.get": ["reads.1@host", "quiet@host"], "memory.put": ["odd@host"]}
    nodes = {
        "MEMORY.GET": "memory.get",
        "MEMORY.PUT": "memory.put",
        "MEMORY.DELETE": "memory.delete",
    }
    rows = build_rows({}, consumers, worker_pool_sizes(STATS), nodes)
    by_node = {r.node: r for r in rows}
    assert by_node["MEMORY.GET"] == QueueStatus("MEMORY.GET", "memory.get", 0, 2, None)
    assert by_node["MEMORY.PUT"].processes is None  # a size that is not an int
    assert by_node["MEMORY.DELETE"].processes == 0  # no consumer: a real 0
    assert by_node["MEMORY.GET"].to_dict()["processes"] is None  # JSON: null
    table = render_table(rows).splitlines()
    assert table[1].split() == ["MEMORY.GET", "memory.get", "0", "2", "unknown"]
    assert table[3].split() == ["MEMORY.DELETE", "memory.delete", "0", "0", "0"]
    assert len({len(line) for line in table[1:]}) == 1  # still aligned


def test_status_without_a_broker_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no ditto.yaml here
    monkeypatch.delenv("DITTO_BROKER_URL", raising=False)
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 2
    assert "no broker configured" in result.output


def test_status_with_an_unreachable_broker_exits_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["status", "--broker", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 1, result.output
    assert "the broker (127.0.0.1:1) is unreachable" in result.output


@pytest.mark.parametrize("module", [status, monitor])
def test_module_all_lists_its_public_names(module: ModuleType) -> None:
    tree = ast.parse(Path(str(module.__file__)).read_text())
    defined = {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
    }
    for node in tree.body:
        if isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    public = {name for name in defined if not name.startswith("_")}
    assert sorted(module.__all__) == sorted(public)
