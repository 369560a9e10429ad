"""The local model server's process, seen from outside: its health, its memory, its start
and its stop (:mod:`ditto_worker.infer.local` runs it; the names it re-exports are the
same objects).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ditto_worker.errors import DittoError

__all__ = ["LocalModelError", "healthy", "rss_bytes", "terminate", "wait_ready"]


class LocalModelError(DittoError):
    """The local model cannot start: a part or xllamacpp is missing, the joined file does
    not match :data:`MODEL_SHA256`, or the server did not come up. The message is safe to
    show (paths of this machine's cache, no model text)."""


def rss_bytes(pid: int) -> int:
    """``VmRSS`` of a process, bytes (0 when unknown)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def healthy(address: str, timeout_s: float = 2.0) -> bool:
    """True when ``{address}/health`` answers 200 within ``timeout_s`` seconds."""
    import httpx

    try:
        response = httpx.get(address + "/health", timeout=timeout_s, trust_env=False)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def wait_ready(process: subprocess.Popen[bytes], ready: Path, timeout_s: float) -> str:
    """The address a starting server wrote to ``ready`` once ``/health`` answers there.

    Raises:
        LocalModelError: the process exited first, or ``timeout_s`` seconds passed.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalModelError(
                f"the local model server exited with code {process.returncode} "
                f"(its log: {ready.with_suffix('')})"
            )
        if ready.is_file():
            address = ready.read_text(encoding="utf-8").strip()
            if healthy(address, 2.0):
                return address
        time.sleep(0.1)
    raise LocalModelError(f"the local model server did not come up within {timeout_s:g} s")


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM ``process`` and wait up to ``timeout_s`` seconds, then SIGKILL it."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
