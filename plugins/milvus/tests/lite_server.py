"""A ``milvus-lite server`` process on a loopback port, for the fault and fleet tests.

Milvus Lite 3 (Python reimplementation) serves the Milvus gRPC protocol from a separate
process here, so a store talks to it through an ``http://127.0.0.1:<port>`` URI exactly
as to a Milvus server; the tests stop it (SIGKILL, mid-call) and start it again on the
same port and folder.

The server is started with gRPC's ``SO_REUSEPORT`` off. gRPC turns it on by default, so a
second server (another test process's, on a busy machine) could bind the same port and
take this one's connections: a SIGSTOPped server then seemed to answer (a stalled-server
test saw MEMORY.QUERY succeed). Without it a taken port fails the bind, the process exits,
and :meth:`LiteServer.start` picks another port; it is ready once the process itself says
it listens, not when the port merely accepts a connection (someone else's would).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ditto_worker.testing.servers import free_port, stop_process

__all__ = ["LiteServer"]

# ``python -c`` program: milvus-lite's command line with gRPC's SO_REUSEPORT off
_LAUNCH = """
import sys, grpc
_server = grpc.server
def server(*args, options=(), **kwargs):
    return _server(*args, options=[*options, ("grpc.so_reuseport", 0)], **kwargs)
grpc.server = server
from milvus_lite.cmdline import main
sys.exit(main(sys.argv[1:]))
"""
READY_LINE = "MilvusLite gRPC server listening on"


class LiteServer:
    """``milvus-lite server --data-dir <folder> --host 127.0.0.1 --port <port>``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.log = folder.parent / f"milvus-lite-{self.port}.log"
        self.process: subprocess.Popen[str] | None = None
        self.started = False

    @property
    def uri(self) -> str:
        """The server's URI."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 120.0) -> str:
        """Start the server and wait until it says it listens; returns the URI. The first
        start may move to another free port if its port was taken meanwhile."""
        for _ in range(5):
            if self._start_once(wait_s):
                self.started = True
                return self.uri
            if self.started:
                break  # a restart keeps the port its clients know
            self.port = free_port()
        raise RuntimeError(f"milvus-lite server did not start: {self._log_tail()}")

    def _start_once(self, wait_s: float) -> bool:
        command = [sys.executable, "-u", "-c", _LAUNCH, "server", "--data-dir",
                   str(self.folder), "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, text=True
            )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False  # the bind failed (port taken) or it crashed: see the log
            with self.log.open(errors="replace") as log:
                log.seek(offset)
                if f"{READY_LINE} 127.0.0.1:{self.port} " in log.read():
                    return True
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"milvus-lite server not ready after {wait_s:.0f} s")

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing flushed on the way out) and wait."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 10 s)."""
        if self.process is not None:
            stop_process(self.process, wait_s=10)
