"""``ditto-worker mcp`` run by hand in a terminal says what it is on stderr; run by a host
over pipes it says nothing (stdout is the protocol's, stderr stays quiet).

A stdio MCP server started in a terminal waits for JSON-RPC in silence, which reads as a
hang to someone trying the command from docs/integrations-mcp.md. The server really runs
here: its stdin is a pseudo-terminal (``os.openpty``), and Ctrl-D on it ends the server.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from ditto_worker.cli.mcp_command import STDIO_HINT  # noqa: E402

BIN = Path(sys.executable).parent
READY_S = 180.0  # a cold start on a busy machine imports the SDK, mcp and a store


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DITTO_BROKER_URL": "",
        "DITTO_RESULT_BACKEND": "",
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "m.sqlite"),
    }


def _read_until(fd: int, wanted: bytes, limit_s: float) -> bytes:
    """Bytes from ``fd`` until ``wanted`` shows up, EOF, or ``limit_s`` seconds."""
    got = b""
    deadline = time.monotonic() + limit_s
    while wanted not in got and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            got += chunk
    return got


@contextmanager
def _in_a_terminal(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``ditto-worker mcp`` with a pseudo-terminal as stdin, once its hint is on stderr:
    ``(process, the terminal's master fd)``; killed at the end if still running."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [str(BIN / "ditto-worker"), "mcp", "--scope", "tenant=acme,user=alice"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    os.close(slave)
    try:
        assert process.stderr is not None
        err = _read_until(process.stderr.fileno(), b"stops it.", READY_S)
        assert STDIO_HINT.encode() in err, err.decode(errors="replace")
        assert process.poll() is None  # still serving, waiting for the host
        yield process, master
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


def test_a_terminal_gets_the_hint_on_stderr(tmp_path: Path) -> None:
    with _in_a_terminal(tmp_path) as (process, master):
        os.write(master, b"\x04")  # Ctrl-D, as the hint says: end of input ends the server
        assert process.wait(timeout=READY_S) == 0
    assert process.stdout is not None
    assert process.stdout.read() == b""  # nothing but protocol on stdout, and none was asked


def test_ctrl_c_stops_the_stdio_server(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C in the terminal) ends the server with exit 130, though the SDK's
    stdin reader thread is still blocked on the terminal."""
    with _in_a_terminal(tmp_path) as (process, _):
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=READY_S) == 130


def test_a_host_over_pipes_gets_no_hint(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "ditto-worker"), "mcp", "--scope", "tenant=acme,user=alice"],
        stdin=subprocess.DEVNULL,  # not a terminal; EOF at once ends the server
        capture_output=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=READY_S,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"serving MCP over stdio" not in done.stderr
    assert done.stdout == b""
