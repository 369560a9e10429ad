"""A ``milvus-lite server`` process on a loopback port, for the fault and fleet tests.

Milvus Lite 3 (Python reimplementation) serves the Milvus gRPC protocol from a separate
process here, so a store talks to it through an ``http://127.0.0.1:<port>`` URI exactly
as to a Milvus server; the tests stop it (SIGKILL, mid-call) and start it again on the
same port and folder.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from ditto_worker.testing.servers import free_port, stop_process

__all__ = ["LiteServer"]


class LiteServer:
    """``milvus-lite server --data-dir <folder> --host 127.0.0.1 --port <port>``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.log = folder.parent / f"milvus-lite-{self.port}.log"
        self.process: subprocess.Popen[str] | None = None

    @property
    def uri(self) -> str:
        """The server's URI."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 60.0) -> str:
        """Start the server and wait until its port accepts connections; returns the URI."""
        command = [sys.executable, "-m", "milvus_lite", "server", "--data-dir",
                   str(self.folder), "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, text=True
            )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"milvus-lite server exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self.uri
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("milvus-lite server did not start")

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing flushed on the way out) and wait."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 10 s)."""
        if self.process is not None:
            stop_process(self.process, wait_s=10)
