"""Throwaway servers for tests and benchmarks: a ``redis-server`` on a loopback port, and
stopping a subprocess (a worker) the way a supervisor does.

One implementation for the test fixtures, the broker-fault test (which stops and starts
its server on the same port) and the ``bench/`` scripts. Nothing persists: no RDB, no
AOF, a temporary folder removed by :meth:`RedisServer.close`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType
from typing import Any

import redis

__all__ = ["RedisServer", "free_port", "log_tail", "stop_process"]


def stop_process(process: subprocess.Popen[Any], wait_s: float = 30.0) -> None:
    """SIGTERM ``process`` (a worker's warm shutdown) and wait; SIGKILL after ``wait_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def log_tail(path: str, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file (to show why a process did not start)."""
    with open(path, errors="replace") as file:
        return file.read()[-chars:]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A ``redis-server`` on ``127.0.0.1:port`` (a free port by default).

    ``start()`` returns once the server answers (up to ``ready_s`` seconds; a port of its
    own choosing that another process took meanwhile is chosen again);
    ``stop()`` kills it, keeping the port for a later ``start()``; ``close()`` stops it
    and removes its folder. Use as a context manager for start + close.

    Raises:
        RuntimeError: ``redis-server`` is not on PATH (``start``), or did not answer.
    """

    def __init__(self, port: int | None = None, ready_s: float = 60.0) -> None:
        self.binary = shutil.which("redis-server")
        self.chosen = port is None  # a port of our choosing may be changed if taken
        self.port = port or free_port()
        self.ready_s = ready_s
        self.folder = tempfile.mkdtemp(prefix="ditto-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT`` (no database number)."""
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        if self.binary is None:
            raise RuntimeError("redis-server not found on PATH")
        for _ in range(5):
            if self._start_once():
                self.chosen = False  # a restart (after stop) keeps the port its clients know
                return self
            if not self.chosen:
                break
            self.port = free_port()  # another process took the port between its choice and now
        raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port}")

    def _start_once(self) -> bool:
        """Start the server; True once PING is answered by *this* process (INFO's
        process_id: a server of someone else's on the port would answer too), False if it
        exited (the port was taken). Waits up to ``ready_s``: a busy machine is slow."""
        assert self.binary is not None
        proc = self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.folder],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url)
        try:
            deadline = time.monotonic() + self.ready_s
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    if int(client.info("server")["process_id"]) == proc.pid:
                        return True
                except redis.ConnectionError:
                    pass
                time.sleep(0.05)
            self.stop()
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """Kill the server (like a crash); the port and folder are kept."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def close(self) -> None:
        """Stop the server and remove its folder; idempotent."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
