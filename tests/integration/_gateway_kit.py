"""A real ``ditto-worker serve`` for the integration tests: its ``ditto.yaml`` and the
server process, ready when ``/healthz`` answers.

Imported as ``tests.integration._gateway_kit``. :func:`write_config` writes the config
every gateway test starts from (the SQLite store in the test's folder, the local model
not started, the gateway's tokens by SHA-256 digest); :func:`serving` writes it and
starts :class:`~ditto_worker.testing.gateway.GatewayServer` on a free loopback port;
:func:`wait_for_answer` waits for a call to answer as it should (the model loaded, a
fleet worker consuming), bounded generously: no test here waits a fixed time.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from ditto_worker.testing.gateway import GatewayServer
from tests.conftest import EVENT_WAIT_S

__all__ = ["ECHO", "READY_S", "digest", "echo_env", "serving", "wait_for_answer", "write_config"]

ECHO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_kind"
"""The ECHO worker kind's package folder (``ECHO.SAY``, ``ECHO.SLEEP``)."""
READY_S = 180.0
"""How long :func:`serving` waits for ``/healthz``, seconds (imports at load 25)."""


def digest(token: str) -> str:
    """The SHA-256 hex digest of ``token`` (what ``gateway.tokens`` holds)."""
    return hashlib.sha256(token.encode()).hexdigest()


def echo_env(folder: Path) -> dict[str, str]:
    """The environment that gives a server or worker the ECHO kind (:data:`ECHO` on
    ``PYTHONPATH``), logging its sleeps to ``folder/sleeps.jsonl``."""
    path = os.pathsep.join([str(ECHO), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "ECHO_SLEEP_LOG": str(folder / "sleeps.jsonl")}


def write_config(folder: Path, tokens: Mapping[str, str], gateway: str = "", top: str = "") -> Path:
    """Write ``folder/ditto.yaml`` and return its path.

    Args:
        tokens: each token -> the rest of its ``gateway.tokens`` entry
            (``"tenant: t1, user: u1"``, ``nodes: [...]`` ...).
        gateway: more ``gateway`` keys, YAML lines indented two spaces.
        top: more top-level YAML before the rest (``fleet: ...``).
    """
    entries = "".join(f"    - {{sha256: {digest(t)}, {rest}}}\n" for t, rest in tokens.items())
    path = folder / "ditto.yaml"
    path.write_text(
        f"""{top}
workers:
  infer: {{local: {{autoStart: false}}}}
plugins:
  sqlite: {{path: '{folder / "memory.sqlite"}'}}
gateway:
{gateway}  tokens:
{entries}""",
        encoding="utf-8",
    )
    return path


@contextmanager
def serving(
    folder: Path,
    tokens: Mapping[str, str],
    *,
    gateway: str = "",
    top: str = "",
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> Iterator[GatewayServer]:
    """:func:`write_config`, then ``ditto-worker serve`` in ``folder`` until the block
    ends (``env``: more environment; ``args``: more ``serve`` arguments)."""
    write_config(folder, tokens, gateway=gateway, top=top)
    with GatewayServer(folder, env=env, args=args, ready_s=READY_S) as server:
        yield server


def wait_for_answer(
    call: Callable[[], httpx.Response],
    server: GatewayServer,
    *,
    meanwhile: Callable[[httpx.Response], object] = lambda answer: None,
    bound_s: float = EVENT_WAIT_S,
) -> httpx.Response:
    """Repeat ``call`` until it answers 200 and return that answer; every other answer
    goes to ``meanwhile`` first (which asserts it is one a server still getting ready
    gives). Fails with the server's log after ``bound_s`` seconds."""
    deadline = time.monotonic() + bound_s
    while True:
        answer = call()
        if answer.status_code == 200:
            return answer
        meanwhile(answer)
        assert time.monotonic() < deadline, (answer.status_code, answer.text, server.log())
        time.sleep(0.2)  # the next try: the server is not ready yet
