"""``ditto-worker example search|write|update|task-state``: the worked memory tasks from the
command line (the seed's ``npm run example:memory:<task>``; docs/memory-tasks.md).

A new run makes a randomized task directory ``.examples-memory-tasks/cli-XXXXXXXX`` in
the working folder with ``request.json`` (the task, secret-shaped spans redacted: only the
run in hand sees the original), ``controller.json`` (the isolated
user this command — the host — vouches for; never read from the request) and, on
SQLite, ``memory.sqlite``; it writes demonstration memories for that user, runs the task
and publishes ``artifacts/<taskId>.json``. ``--directory DIR`` resumes the unfinished
task there, or runs a new task against the database and user kept there (the backend
comes from ``request.json``). Offline by default: the embedded runtime, the packaged
local model (or the endpoint ``ditto.yaml`` / ``DITTO_WORKER_INFER_BASE_URL`` names),
local embeddings on Qdrant.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from ditto_worker.cli.options import fail

__all__ = ["CONVERSATIONS", "DEMO_MEMORIES", "EXAMPLES_DIR", "example"]

EXAMPLES_DIR: Final = ".examples-memory-tasks"
"""Where new task directories are made (in the working folder)."""

CONVERSATIONS: Final[dict[str, list[dict[str, str]]]] = {
    "write": [
        {"role": "assistant", "content": "How should I write your progress updates?"},
        {"role": "user", "content": "Please always write to me in German."},
    ],
    "update": [
        {"role": "assistant", "content": "Shall I keep writing in English?"},
        {"role": "user", "content": "From now on, always write to me in French."},
    ],
}
"""The built-in conversations a new ``write`` / ``update`` task learns from."""

DEMO_MEMORIES: Final[list[dict[str, Any]]] = [
    {"key": "fact:kickoff", "content": "Project Atlas kicked off in March with three stages.",
     "metadata": {"kind": "fact"}},
    {"key": "fact:team", "content": "The Atlas team meets on Mondays.",
     "metadata": {"kind": "fact"}},
]  # fmt: skip
"""Demonstration memories of a new user (facts: never recalled as preferences)."""

_DEMO_PREFERENCE: Final = {
    "key": "preference:language",
    "content": {"field": "language", "value": "en", "statement": "Write to me in English."},
    "metadata": {"kind": "preference", "field": "language", "value": "en", "version": 1,
                 "quote": "Write to me in English.", "taskId": "demo"},
}  # fmt: skip
"""A new ``search`` / ``update`` user also has a preference to recall or revise."""

KindArg = Annotated[str, typer.Argument(help="search, write, update or task-state.")]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="sqlite (default), postgres or qdrant; with --directory the backend of request.json.",
    ),  # fmt: skip
]
CheckpointOpt = Annotated[
    bool,
    typer.Option(
        "--checkpoint",
        help="Stop after the first stage checkpoint commits; resume later with --directory.",
    ),  # fmt: skip
]
DirectoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--directory",
        help="A task directory made by an earlier run: resume its "
        "unfinished task, or run a new one for the same database and user.",
    ),  # fmt: skip
]
ConversationOpt = Annotated[
    Path | None,
    typer.Option(
        "--conversation",
        exists=True,
        dir_okay=False,
        help="JSON file of messages [{role, content}] to learn from (write, "
        "update) instead of the built-in one.",
    ),  # fmt: skip
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="ditto.yaml to load.")]


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail("example", f"cannot read {what} {path}: {type(exc).__name__}")


def _write_request(path: Path, request: dict[str, Any]) -> None:
    """Writes ``request`` with secret-shaped spans redacted (issue 35 item 2): the run in
    hand uses the original, a resume reads only the redacted text."""
    from ditto_worker.memory_tasks.secret_shapes import redact_json

    path.write_text(json.dumps(redact_json(request), indent=2) + "\n")


def _new_request(kind: str, backend: str, conversation: Path | None) -> dict[str, Any]:
    turns = CONVERSATIONS.get(kind, [])
    if conversation is not None:
        turns = _read_json(conversation, "the conversation")
    return {"taskId": f"{kind}-{secrets.token_hex(4)}", "kind": kind, "backend": backend,
            "conversation": turns}  # fmt: skip


def _prepare(
    kind: str, backend: str | None, directory: Path | None, conversation: Path | None
) -> tuple[Path, dict[str, Any], dict[str, str], bool]:
    """(task directory, request, identity, is it a new directory)."""
    if directory is None:
        base = Path(EXAMPLES_DIR)
        base.mkdir(exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="cli-", dir=base))
        identity = {"tenant": "example", "user": f"user-{secrets.token_hex(6)}"}
        (folder / "controller.json").write_text(json.dumps(identity, indent=2) + "\n")
        request = _new_request(kind, backend or "sqlite", conversation)
        _write_request(folder / "request.json", request)
        return folder, request, identity, True
    identity = _read_json(directory / "controller.json", "the controller identity")
    current = _read_json(directory / "request.json", "the task request")
    if backend is not None and backend != current.get("backend"):
        fail("example", f"{directory} keeps a {current.get('backend')} database; "
                        "omit --backend to use it")  # fmt: skip
    done = (directory / "artifacts" / f"{current.get('taskId')}.json").is_file()
    if not done and current.get("kind") != kind:
        fail("example", f"{directory} has an unfinished {current.get('kind')} task "
                        f"{current.get('taskId')}: finish it with 'ditto-worker example "
                        f"{current.get('kind')} --directory {directory}'")  # fmt: skip
    if done:  # a new task for the same database and user
        history = directory / "requests"
        history.mkdir(exist_ok=True)
        _write_request(history / f"{current['taskId']}.json", current)
        current = _new_request(kind, current["backend"], conversation)
        _write_request(directory / "request.json", current)
    return directory, current, identity, False


_NEEDS: Final[dict[str, list[tuple[str, str]]]] = {
    "postgres": [("postgres", "psycopg"), ("postgres", "psycopg_pool")],
    "qdrant": [("qdrant", "qdrant_client"), ("retrieval", "sentence_transformers")],
}
"""Per backend, the ``(extra, module)`` pairs its store needs beyond a base install."""


def _missing_extra(backend: str, config: Any) -> str | None:
    """The extra to install before this task can run, or ``None`` (issue 35 item 9: after
    the README's base install the command fails before it makes anything)."""
    from importlib.util import find_spec

    needs = [("infer", "httpx")]
    if not config.infer_worker.base_url and config.infer_worker.local.auto_start:
        needs.append(("infer", "xllamacpp"))  # the packaged local model
    for extra, module in [*needs, *_NEEDS.get(backend, [])]:
        if find_spec(module) is None:
            return extra
    return None


def _check_install(kind: str, backend: str | None, directory: Path | None, config: Any) -> None:
    if directory is not None:
        backend = _read_json(directory / "request.json", "the task request").get("backend")
    extra = _missing_extra(str(backend or "sqlite"), config)
    if extra is not None:
        fail("example", f"the {kind} task on {backend or 'sqlite'} needs the '{extra}' extra: "
                        f"pip install -e '.[{extra}]' (nothing was created)")  # fmt: skip


def _runtime(folder: Path, backend: str, config: Any) -> tuple[Any, Any]:
    from ditto_worker import create_context_worker, create_ditto, create_infer_worker
    from ditto_worker.memory_tasks import open_memory_storage

    fleet = config.fleet.model_copy(update={"broker_url": "", "result_backend": ""})
    config = config.model_copy(update={"fleet": fleet})  # the embedded runtime, always
    storage = open_memory_storage(backend, folder)
    workers = [*storage.workers, create_context_worker(config.context_worker),
               create_infer_worker(config.infer_worker)]  # fmt: skip
    return create_ditto(workers=workers, config=config), storage


def _policy(config_path: Path | None) -> Any:
    """``tasks.policy`` of the config, validated before anything is made."""
    from ditto_worker.errors import ConfigError
    from ditto_worker.memory_tasks import load_task_policy
    from ditto_worker.memory_tasks.policy import PolicyError

    try:
        return load_task_policy(config_path)
    except (PolicyError, ConfigError) as exc:
        fail("example", f"config error: {exc}")


def _seed(runtime: Any, kind: str, identity: dict[str, str]) -> None:
    memories = [*DEMO_MEMORIES, *([_DEMO_PREFERENCE] if kind in ("search", "update") else [])]
    done = runtime.invoke("MEMORY.WRITE", {"memories": memories}, scope=identity)
    if done.status != "success":
        fail("example", f"demonstration memories: {done.error.code}: {done.error.message}", 1)


def example(
    kind: KindArg,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = False,
    directory: DirectoryOpt = None,
    conversation: ConversationOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Run a worked memory task: search, write, update or task-state.

    Makes a task directory under .examples-memory-tasks/ (request.json, an isolated
    user, demonstration memories; SQLite keeps memory.sqlite there), runs the task on
    the embedded runtime with the local model (or the endpoint ditto.yaml names) and
    publishes artifacts/TASKID.json. Prints one line per stage and where the artifact
    is. --directory DIR resumes the unfinished task in DIR, or runs a new task against
    the database and user kept there.
    """
    from ditto_worker.config import default_config
    from ditto_worker.errors import ConfigError, DittoError
    from ditto_worker.memory_tasks import (
        BACKENDS,
        TASK_KINDS,
        TaskOptions,
        run_search,
        run_task_state,
        run_update,
        run_write,
    )

    if kind not in TASK_KINDS:
        fail("example", f"unknown task {kind!r}: {', '.join(TASK_KINDS)}")
    if backend is not None and backend not in BACKENDS:
        fail("example", f"unknown backend {backend!r}: {', '.join(BACKENDS)}")
    policy = _policy(config)
    try:
        loaded = default_config(config)
    except ConfigError as exc:
        fail("example", f"config error: {exc}")
    _check_install(kind, backend, directory, loaded)
    folder, request, identity, new = _prepare(kind, backend, directory, conversation)
    typer.echo(f"task directory: {folder}")
    typer.echo(f"task {request['taskId']} ({kind}) on {request['backend']} for user "
               f"{identity['user']}")  # fmt: skip
    entry = {"search": run_search, "write": run_write, "update": run_update,
             "task-state": run_task_state}[kind]  # fmt: skip
    try:
        runtime, storage = _runtime(folder, request["backend"], loaded)
    except ConfigError as exc:
        fail("example", f"config error: {exc}")
    try:
        if new:
            _seed(runtime, kind, identity)
        options = TaskOptions(
            identity["tenant"], identity["user"], folder / "artifacts",
            allow_write=kind in ("write", "update"), stop_after_checkpoint=checkpoint,
            on_stage=lambda line: typer.echo(f"  {line}"),
        )  # fmt: skip
        outcome = entry(runtime, {"request": request}, options, policy=policy)
    except DittoError as exc:
        fail("example", f"failed: {exc}", 1)
    finally:
        runtime.close()
        storage.close()
    _report(outcome, folder, kind)


def _report(outcome: Any, folder: Path, kind: str) -> None:
    if outcome.status == "checkpointed":
        typer.echo(f"stopped after the first checkpoint; resume with: ditto-worker example "
                   f"{kind} --directory {folder}")  # fmt: skip
        return
    if outcome.status != "success":
        error = outcome.error or {}
        fail("example", f"{outcome.status}: {error.get('code')}: {error.get('message')}; "
                        f"resume with --directory {folder}", 1)  # fmt: skip
    artifact = outcome.artifact or {}
    if artifact.get("message"):  # the published artifact's: already redacted
        typer.echo(f"message: {artifact['message']}")
    admission = artifact.get("admission") or {}
    if admission:
        typer.echo(f"admission: {admission['decision']}")
        if admission["decision"] != "admitted":
            for reason in admission["reasons"]:
                typer.echo(f"  {reason}")
    typer.echo(f"artifact: {outcome.artifact_path}")
    if any("run the update task" in r for r in admission.get("reasons", [])):
        fail("example", f"refused: a stored preference has another value; change it with: "
                        f"ditto-worker example update --directory {folder}", 1)  # fmt: skip
