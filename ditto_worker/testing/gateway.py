"""A real ``ditto-worker serve`` process on a loopback port, for tests and benchmarks.

:class:`GatewayServer` writes nothing itself: it starts ``python -m ditto_worker serve``
in ``folder`` (whose ``ditto.yaml`` names the gateway's tokens and the stores), waits until
``/healthz`` answers, and stops it with SIGTERM (a graceful drain) on :meth:`close`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from ditto_worker.testing.servers import free_port, log_tail, stop_process

__all__ = ["GatewayServer"]


class GatewayServer:
    """``ditto-worker serve --port P --config folder/ditto.yaml`` on 127.0.0.1.

    Args:
        folder: the working folder; its ``ditto.yaml`` is the config; the log is
            ``folder/gateway.log``.
        env: extra environment over ``os.environ`` (``DITTO_BROKER_URL`` …).
        args: more ``serve`` arguments (``--workers 2`` …).
        ready_s: how long :meth:`start` waits for ``/healthz``, seconds.
    """

    def __init__(
        self,
        folder: Path,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        ready_s: float = 180.0,
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "gateway.log"
        self.env = {**os.environ, **(env or {})}
        self.args = list(args or [])
        self.ready_s = ready_s
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> GatewayServer:
        """Start the server and wait for ``/healthz``.

        Raises:
            RuntimeError: the process exited, or did not answer within ``ready_s``
                (the message ends with its log's tail).
        """
        with self.log_path.open("a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ditto_worker", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--config", str(self.folder / "ditto.yaml"),
                 *self.args],
                cwd=self.folder, env=self.env, stdout=out, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"serve did not answer /healthz: {self.log()}")

    def log(self) -> str:
        """The tail of the server's log."""
        return log_tail(str(self.log_path))

    def close(self, wait_s: float = 30.0) -> int | None:
        """SIGTERM (drain, then exit) and wait; returns the exit code."""
        if self.process is None:
            return None
        stop_process(self.process, wait_s)
        return self.process.returncode

    def __enter__(self) -> GatewayServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
