"""Fleet status: per-queue backlog from the broker and per-node workers from ``celery inspect``.

``ditto-worker status`` prints one row per node of every installed worker kind (MEMORY,
RETRIEVAL, CONTEXT, INFER, a kind of your own), in the order the worker definitions give::

    node              queue              backlog  workers  processes
    CONTEXT.UPDATE    context.update           0        1          8
    ...
    MEMORY.GET        memory.get               0        1          4
    ...

- **backlog**: messages waiting in the node's queue on the broker, not yet taken by a
  worker (a worker's prefetched and running tasks are not counted). On Redis this is
  ``LLEN`` of the queue's list, summed over kombu's priority lists (``memory.get``,
  ``memory.get\\x06\\x163`` …), read through kombu's passive ``queue_declare``.
- **workers**: Celery workers (one per ``ditto-worker worker`` process tree) consuming
  the queue, from ``app.control.inspect().active_queues()``.
- **processes**: the sum of those workers' pool sizes (``stats()["pool"]["max-concurrency"]``;
  for a worker started with ``--autoscale MAX,MIN``, its current size, between MIN and MAX).

A worker that does not answer within ``timeout_s`` is not counted. Errors::

    DittoError
    └── BrokerUnavailableError   the broker refused or timed out the connection
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from ditto_worker.errors import DittoError
from ditto_worker.fleet.redis_urls import server_address

__all__ = [
    "BrokerUnavailableError",
    "QueueStatus",
    "app_nodes",
    "build_rows",
    "collect_status",
    "queue_backlog",
    "queue_consumers",
    "render_table",
    "worker_pool_sizes",
]


class BrokerUnavailableError(DittoError):
    """The broker could not be reached (connection refused, DNS, timeout)."""


@dataclass(frozen=True)
class QueueStatus:
    """One row of the status table: a node and its queue.

    Attributes:
        node: node id, e.g. ``MEMORY.GET`` (also the Celery task name).
        queue: the node's queue, e.g. ``memory.get``.
        backlog: messages waiting on the broker (>= 0).
        workers: Celery workers consuming ``queue`` that answered the inspect (>= 0).
        processes: sum of those workers' pool sizes (>= 0; 0 when no worker consumes the
            queue), or ``None`` when a consuming worker did not report its pool size
            (unknown, never a made-up 0; ``unknown`` in the table, ``null`` in JSON).
    """

    node: str
    queue: str
    backlog: int
    workers: int
    processes: int | None

    def to_dict(self) -> dict[str, Any]:
        """The row as a JSON-ready dict (keys as the attribute names)."""
        return asdict(self)


def queue_backlog(app: Celery, queues: Sequence[str]) -> dict[str, int]:
    """Messages waiting in each queue, read from the broker.

    Uses a passive ``queue_declare`` (nothing is created): on Redis, kombu answers with
    ``LLEN`` summed over the queue's priority lists. A queue that does not exist (on
    Redis: an empty list, which Redis deletes) counts 0.

    Args:
        app: a Celery app connected to the fleet's broker.
        queues: queue names, e.g. ``["memory.get", ...]``.

    Returns:
        ``{queue: backlog}`` for every name in ``queues``.

    Raises:
        BrokerUnavailableError: the broker could not be reached (one retry).
    """
    counts: dict[str, int] = {}
    with app.connection_for_read() as conn:
        try:
            conn.ensure_connection(max_retries=1)
        except (OperationalError, *conn.connection_errors) as exc:
            where = server_address(str(app.conf.broker_url or ""))
            raise BrokerUnavailableError(
                f"the broker ({where}) is unreachable ({type(exc).__name__})"
            ) from exc
        for queue in queues:
            channel = conn.channel()
            try:
                counts[queue] = int(channel.queue_declare(queue=queue, passive=True).message_count)
            except conn.channel_errors:
                counts[queue] = 0  # no such queue: nothing waiting
            finally:
                channel.close()
    return counts


def queue_consumers(replies: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Workers per queue, from an ``inspect().active_queues()`` reply.

    Args:
        replies: ``{worker_name: [{"name": queue, ...}, ...]}`` as Celery returns it, or
            ``None`` (no worker answered).

    Returns:
        ``{queue: [worker_name, ...]}``, worker names sorted; queues no worker consumes
        are absent.
    """
    consumers: dict[str, list[str]] = {}
    for worker, queues in (replies or {}).items():
        for queue in queues or []:
            name = queue.get("name") if isinstance(queue, Mapping) else None
            if isinstance(name, str):
                consumers.setdefault(name, []).append(worker)
    return {queue: sorted(set(workers)) for queue, workers in consumers.items()}


def worker_pool_sizes(replies: Mapping[str, Any] | None) -> dict[str, int]:
    """Pool size of each worker, from an ``inspect().stats()`` reply.

    Args:
        replies: ``{worker_name: {"pool": {"max-concurrency": n, ...}, ...}}`` or ``None``.

    Returns:
        ``{worker_name: n}``; a worker whose reply has no integer ``max-concurrency`` is
        absent.
    """
    sizes: dict[str, int] = {}
    for worker, stats in (replies or {}).items():
        pool = stats.get("pool") if isinstance(stats, Mapping) else None
        size = pool.get("max-concurrency") if isinstance(pool, Mapping) else None
        if isinstance(size, int) and not isinstance(size, bool):
            sizes[worker] = size
    return sizes


def build_rows(
    backlog: Mapping[str, int],
    consumers: Mapping[str, Sequence[str]],
    pool_sizes: Mapping[str, int],
    nodes: Mapping[str, str],
) -> list[QueueStatus]:
    """One :class:`QueueStatus` per node, in ``nodes`` order.

    Args:
        backlog: ``{queue: messages waiting}``; a missing queue counts 0.
        consumers: ``{queue: [worker_name, ...]}`` (see :func:`queue_consumers`).
        pool_sizes: ``{worker_name: pool size}`` (see :func:`worker_pool_sizes`); a
            consuming worker missing here makes its rows' ``processes`` ``None``.
        nodes: ``{node_id: queue}`` (:func:`app_nodes`).

    Returns:
        ``len(nodes)`` rows.
    """
    rows = []
    for node, queue in nodes.items():
        workers = consumers.get(queue, [])
        sizes = [pool_sizes.get(w) for w in workers]
        rows.append(
            QueueStatus(
                node=node,
                queue=queue,
                backlog=int(backlog.get(queue, 0)),
                workers=len(workers),
                processes=None if None in sizes else sum(s for s in sizes if s is not None),
            )
        )
    return rows


_COLUMNS = (("node", "<", 15), ("queue", "<", 16), ("backlog", ">", 8))
_COUNT_COLUMNS = (("workers", ">", 9), ("processes", ">", 11))


def render_table(rows: Sequence[QueueStatus]) -> str:
    """The rows as a plain-text table: a header line, then one line per row.

    Args:
        rows: from :func:`build_rows`.

    Returns:
        Lines joined by ``\\n`` with a trailing newline; columns node, queue, backlog,
        workers, processes (numbers right-aligned; an unknown count reads ``unknown``); a
        column widens to keep two spaces after its longest value (``RETRIEVAL.SEARCH
        retrieval.search``).
    """
    table = [
        {name: "unknown" if value is None else value for name, value in row.to_dict().items()}
        for row in rows
    ]
    columns = [
        (name, align, max([width, *(len(str(values[name])) + 2 for values in table)]))
        for name, align, width in _COLUMNS + _COUNT_COLUMNS
    ]
    header = "".join(f"{name:{align}{width}}" for name, align, width in columns)
    lines = [header.rstrip()]
    for values in table:
        line = "".join(f"{values[name]:{align}{width}}" for name, align, width in columns)
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def app_nodes(app: Celery) -> dict[str, str]:
    """``{node_id: queue}`` of every node ``app`` routes (its worker definitions' nodes)."""
    routes = app.conf.task_routes or {}
    return {node: str(route["queue"]) for node, route in routes.items()}


def collect_status(app: Celery, timeout_s: float = 1.0) -> list[QueueStatus]:
    """Read backlog from the broker and workers from a ``celery inspect`` broadcast.

    Args:
        app: a Celery app on the fleet's broker (see
            :func:`ditto_worker.fleet.celery_app.create_celery_app`).
        timeout_s: how long each inspect broadcast waits for replies, seconds (two
            broadcasts: ``active_queues`` and ``stats``).

    Returns:
        One row per node the app routes (:func:`build_rows`).

    Raises:
        BrokerUnavailableError: the broker could not be reached.
    """
    nodes = app_nodes(app)
    backlog = queue_backlog(app, list(nodes.values()))
    inspect = app.control.inspect(timeout=timeout_s)
    consumers = queue_consumers(inspect.active_queues())
    pool_sizes = worker_pool_sizes(inspect.stats()) if consumers else {}
    return build_rows(backlog, consumers, pool_sizes, nodes)
