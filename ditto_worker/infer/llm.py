"""``python -m ditto_worker.infer.llm``: the local model server from the shell.

``scripts/llm.sh`` wraps it, in the spirit of ``scripts/postgres.sh``: progress goes to
stderr, ``export`` lines to stdout, so ``eval "$(bash scripts/llm.sh start)"`` sets
``DITTO_WORKER_INFER_BASE_URL`` and ``DITTO_WORKER_INFER_MODEL``::

    python -m ditto_worker.infer.llm start [--port 18080]   # detached, idempotent
    python -m ditto_worker.infer.llm status [--port 18080]  # exit 0 when it answers
    python -m ditto_worker.infer.llm stop [--port 18080]
    python -m ditto_worker.infer.llm model                  # join + verify, print the path
    python -m ditto_worker.infer.llm serve ...              # the server in this process

The port defaults to ``$DITTO_LLM_PORT`` or 18080; state (pid, log) lives in
``$DITTO_LLM_DIR`` or ``/tmp/ditto-llm-<port>``. The server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ditto_worker.config.infer import LocalModelSettings
from ditto_worker.infer.local import (
    MODEL_NAME,
    LocalModelError,
    LocalModelServer,
    healthy,
    packaged_model_path,
    serve,
)

__all__ = ["main"]


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir or f"/tmp/ditto-llm-{args.port}")


def _read_pid(folder: Path) -> int | None:
    try:
        pid = int((folder / "server.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _exports(address: str) -> str:
    return (
        f"export DITTO_WORKER_INFER_BASE_URL={address}/v1\n"
        f"export DITTO_WORKER_INFER_MODEL={MODEL_NAME}"
    )


def _cmd_start(args: argparse.Namespace, settings: LocalModelSettings) -> int:
    folder = _state_dir(args)
    address = f"http://127.0.0.1:{args.port}"
    if _read_pid(folder) is not None and healthy(address, 2.0):
        _say(f"already running on {address}")
        print(_exports(address))
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    _say(f"verifying the model and starting {MODEL_NAME} on {address}")
    server = LocalModelServer.start(
        settings, port=args.port, log_path=folder / "server.log", detach=True
    )
    (folder / "server.pid").write_text(str(server.pid))
    rss_mib = server.rss_bytes() / 2**20
    _say(f"ready: pid {server.pid}, RSS {rss_mib:.0f} MiB, log {server.log_path}")
    print(_exports(server.address))
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    folder = _state_dir(args)
    pid = _read_pid(folder)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _read_pid(folder) is not None:
            time.sleep(0.1)
        if _read_pid(folder) is not None:
            os.kill(pid, signal.SIGKILL)
    for name in ("server.pid", "server.log"):
        (folder / name).unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    _say("stopped")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    address = f"http://127.0.0.1:{args.port}"
    if _read_pid(_state_dir(args)) is not None and healthy(address, 2.0):
        _say(f"running on {address}")
        return 0
    _say("not running")
    return 1


def _say(message: str) -> None:
    print(f"llm: {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ditto_worker.infer.llm")
    sub = parser.add_subparsers(dest="command", required=True)
    default_port = int(os.environ.get("DITTO_LLM_PORT") or 18080)
    for name in ("start", "stop", "status"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--port", type=int, default=default_port)
        cmd.add_argument("--dir", default=os.environ.get("DITTO_LLM_DIR") or None)
    sub.add_parser("model", help="join and verify the packaged model, print its path")
    srv = sub.add_parser("serve", help="run the server in this process (used by start)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=0)
    srv.add_argument("--threads", type=int, default=0)
    srv.add_argument("--ctx-size", type=int, default=LocalModelSettings().ctx_size)
    srv.add_argument("--batch-tokens", type=int, default=LocalModelSettings().batch_tokens)
    srv.add_argument("--model-path", default=None)
    srv.add_argument("--ready-file", default=None)
    srv.add_argument("--parent-pid", type=int, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m ditto_worker.infer.llm`` (see the module docstring)."""
    args = _parser().parse_args(argv)
    settings = LocalModelSettings()
    try:
        if args.command == "start":
            return _cmd_start(args, settings)
        if args.command == "stop":
            return _cmd_stop(args)
        if args.command == "status":
            return _cmd_status(args)
        if args.command == "model":
            print(packaged_model_path())
            return 0
        settings = LocalModelSettings(
            threads=args.threads, ctx_size=args.ctx_size, batch_tokens=args.batch_tokens
        )
        return serve(
            settings, host=args.host, port=args.port, model_path=args.model_path,
            ready_file=args.ready_file, parent_pid=args.parent_pid,
        )  # fmt: skip
    except LocalModelError as exc:
        _say(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
