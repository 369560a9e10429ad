"""A Redis Sentinel group on loopback for failover tests: a primary, a replica and three
sentinels, all ``redis-server`` processes from the same package (issue 37 item 5).

``start()`` returns once the sentinels agree on the primary and know the replica;
``kill_primary()`` SIGKILLs the primary; ``wait_promoted()`` returns once every sentinel
names the replica as the master. Every wait is bounded and generous (a busy machine), and
polls state; none sleeps a fixed time for the sake of it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from ditto_worker.testing.servers import free_port, stop_process

MASTER = "ditto-test"
"""The monitored master's name."""

DOWN_AFTER_MS = 1000
"""Sentinels mark the primary down after this long without an answer (ms)."""


def _wait(what: str, check: Any, within_s: float) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        try:
            value = check()
            if value:
                return value
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within_s:.0f} s waiting for {what}")
        time.sleep(0.05)


class SentinelGroup:
    """A primary, one replica and three sentinels (quorum 2) on free loopback ports."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        self.folder = Path(tempfile.mkdtemp(prefix="ditto-sentinel-"))
        self.primary_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """``sentinel://127.0.0.1:P1;sentinel://127.0.0.1:P2;…`` (database 0)."""
        return ";".join(f"sentinel://127.0.0.1:{p}/0" for p in self.sentinel_ports)

    def _server(self, name: str, port: int, *extra: str) -> None:
        folder = self.folder / name
        folder.mkdir()
        assert self.binary is not None
        argv = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(folder), *extra]  # fmt: skip
        self.procs[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL)

    def _sentinel(self, index: int, port: int) -> None:
        folder = self.folder / f"sentinel{index}"
        folder.mkdir()
        conf = folder / "sentinel.conf"  # a sentinel rewrites its own file: one each
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} 10000\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        assert self.binary is not None
        self.procs[f"sentinel{index}"] = subprocess.Popen(
            [self.binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL
        )

    def start(self, within_s: float = 60.0) -> SentinelGroup:
        """Starts every process and waits until the group is ready (``within_s``)."""
        if self.binary is None:
            raise RuntimeError("redis-server not found on PATH")
        self._server("primary", self.primary_port)
        self._server("replica", self.replica_port, "--replicaof", "127.0.0.1",
                     str(self.primary_port))  # fmt: skip
        for index, port in enumerate(self.sentinel_ports):
            self._sentinel(index, port)
        replica = redis.Redis(port=self.replica_port, socket_timeout=2)
        _wait("the replica to sync", lambda: replica.info("replication").get(
            "master_link_status") == "up", within_s)  # fmt: skip
        for port in self.sentinel_ports:
            sentinel = redis.Redis(port=port, socket_timeout=2)
            _wait("every sentinel to know the replica and its peers", lambda s=sentinel: (
                len(s.sentinel_slaves(MASTER)) == 1 and len(s.sentinel_sentinels(MASTER)) == 2
            ), within_s)  # fmt: skip
        return self

    def master_port(self, sentinel_port: int) -> int:
        """The master's port as one sentinel names it."""
        client = redis.Redis(port=sentinel_port, socket_timeout=2)
        return int(client.sentinel_get_master_addr_by_name(MASTER)[1])

    def kill_primary(self) -> float:
        """SIGKILLs the primary; returns ``time.monotonic()`` of the kill."""
        self.procs["primary"].kill()
        self.procs["primary"].wait(30)
        return time.monotonic()

    def wait_promoted(self, within_s: float = 90.0) -> float:
        """Waits until every sentinel names the replica the master, and it answers as one
        (``ROLE`` master); returns ``time.monotonic()`` then."""
        for port in self.sentinel_ports:
            _wait("the sentinels to promote the replica",
                  lambda p=port: self.master_port(p) == self.replica_port, within_s)  # fmt: skip
        replica = redis.Redis(port=self.replica_port, socket_timeout=2)
        _wait("the replica to act as the master",
              lambda: replica.role()[0] in (b"master", "master"), within_s)  # fmt: skip
        return time.monotonic()

    def close(self) -> None:
        for proc in self.procs.values():
            stop_process(proc, wait_s=10)
        shutil.rmtree(self.folder, ignore_errors=True)
