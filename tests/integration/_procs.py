"""Real ``ditto-worker worker`` and ``ditto-worker flower`` processes for operations tests.

Imported as ``tests.integration._procs``. Each process runs in a folder of the test's own
(its ``ditto.yaml``, if the test writes one), in a session of its own (so a test can
signal its whole process group as honcho does), logging to a file the test reads.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ditto_worker.testing.servers import free_port

__all__ = ["FlowerProc", "WorkerProc", "children"]


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (a prefork worker's pool)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


class WorkerProc:
    """``python -m ditto_worker worker ARGS`` in ``folder``, output in ``folder/<name>.log``.

    Args:
        folder: working folder (its ``ditto.yaml`` is the worker's config).
        args: the ``worker`` command's arguments.
        env: extra environment (``DITTO_BROKER_URL`` …) over ``os.environ``.
        name: the log file's stem.
    """

    def __init__(
        self, folder: Path, args: list[str], env: dict[str, str], name: str = "worker"
    ) -> None:
        self.folder = folder
        self.log_path = folder / f"{name}.log"
        self.log_path.touch()
        self.env = {**os.environ, **env}
        with self.log_path.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ditto_worker", "worker", *args],
                cwd=folder, env=self.env, stdout=out, stderr=subprocess.STDOUT, text=True,
                start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until the log says ``ready.`` (fails if the process exits first)."""
        deadline = time.monotonic() + timeout_s
        while "ready." not in self.log():
            assert self.proc.poll() is None, f"worker exited {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"worker not ready:\n{self.log()[-4000:]}"
            time.sleep(0.1)

    def wait_exit(self, timeout_s: float) -> int:
        """The exit code, waiting up to ``timeout_s`` (fails on time-out)."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running:\n{self.log()[-4000:]}") from None

    def signal_group(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the worker's whole process group (main process and pool)."""
        os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        """SIGTERM the main process (warm shutdown); SIGKILL the group after 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.wait(10)


class FlowerProc:
    """``python -m ditto_worker flower`` on a free loopback port with fresh credentials."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.credentials = f"ops:{secrets.token_urlsafe(12)}"
        self.log_path = folder / "flower.log"
        with self.log_path.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ditto_worker", "flower", "--port", str(self.port)],
                cwd=folder, env={**os.environ, **env, "FLOWER_BASIC_AUTH": self.credentials},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of an authenticated GET (HTTP errors returned, not raised)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        token = base64.b64encode(self.credentials.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=3) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def tasks(self) -> dict[str, Any]:
        """Flower's ``/api/tasks`` (task id -> its fields), ``{}`` while not listening."""
        try:
            status, body = self.get("/api/tasks")
        except OSError:
            return {}
        return dict(json.loads(body)) if status == 200 else {}

    def wait_listening(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.get("/healthcheck")[0] == 200:
                    return
            except OSError:
                pass
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, self.log_path.read_text()
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
