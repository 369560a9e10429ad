"""When a worker was last seen, and where a server is, as messages say it (issue 13 item 5).

The sentences of :func:`describe_last_seen` for every state of a queue's heartbeat key, and
:func:`server_address` for every URL form the fleet accepts: ``host:port`` only, never a
user, password or database.
"""

from __future__ import annotations

import json

import fakeredis
import pytest

from ditto_worker.fleet.heartbeat import (
    ALIVE_WITHIN_S,
    HEARTBEAT_TTL_S,
    QueueHeartbeat,
    describe_last_seen,
    heartbeat_key,
)
from ditto_worker.fleet.redis_urls import server_address

NOW = 1_796_094_750.0  # 2026-12-01T03:12:30Z


def beat(at: float, hostname: str = "celery@a") -> bytes:
    return json.dumps({"at": at, "hostname": hostname}).encode()


def test_no_key_says_no_worker_in_the_keys_lifetime() -> None:
    text = describe_last_seen("memory.get", None, NOW)
    assert text == "no worker has consumed the queue 'memory.get' in the last 7 days"


def test_a_fresh_key_says_the_worker_runs_but_did_not_answer() -> None:
    text = describe_last_seen("memory.get", beat(NOW - 3), NOW)
    assert text == (
        "a worker for the queue 'memory.get' was last seen 3 s ago (celery@a): "
        "it is running but did not answer in time"
    )


@pytest.mark.parametrize(
    ("age_s", "ago"),
    [(ALIVE_WITHIN_S + 1, "16 s ago"), (600, "10 min ago"), (7200, "2 h ago"),
     (3 * 86400, "3 days ago")],
)  # fmt: skip
def test_an_old_key_says_when_and_that_none_runs_now(age_s: float, ago: str) -> None:
    text = describe_last_seen("context.get", beat(NOW - age_s, ""), NOW)
    assert text.startswith("a worker for the queue 'context.get' was last seen 2026-")
    assert text.endswith(f"({ago}); none is running now")


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"at": "x"}', b'{"hostname": "h"}', b"\xff"])
def test_an_unreadable_key_is_said_so_never_raised(raw: bytes) -> None:
    assert describe_last_seen("q", raw, NOW) == "the queue 'q' has an unreadable heartbeat"


def test_the_heartbeat_writes_each_consumed_queue_with_a_ttl() -> None:
    client = fakeredis.FakeRedis()
    queues = ["memory.get", "memory.query"]
    heartbeat = QueueHeartbeat(client, lambda: list(queues), "celery@b", every_s=3600)
    try:
        heartbeat.beat()
        queues.append("memory.search")  # celery control add_consumer: seen on the next beat
        heartbeat.beat()
        for queue in queues:
            value = json.loads(client.get(heartbeat_key(queue)) or b"{}")
            assert value["hostname"] == "celery@b"
            assert 0 < client.ttl(heartbeat_key(queue)) <= HEARTBEAT_TTL_S
    finally:
        heartbeat.close()


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("redis://:s3cret@10.0.0.5:6380/0", "10.0.0.5:6380"),
        ("rediss://user:s3cret@cache.example:6390/2", "cache.example:6390"),
        ("redis://u:s3cret@host/1", "host"),
        ("redis://[::1]:6379/0", "[::1]:6379"),
        ("sentinel://:s3cret@a:26379;sentinel://b:26380", "a:26379, b:26380"),
        ("amqp://guest:s3cret@rabbit:5672//", "rabbit:5672"),
        ("unix:///run/redis.sock?db=1", "/run/redis.sock"),
        ("redis://h:notaport/0", "an unparsable address"),
        ("memory://", "in-process"),
    ],
)
def test_server_address_is_host_and_port_without_credentials(url: str, address: str) -> None:
    assert server_address(url) == address
    assert "s3cret" not in server_address(url)
