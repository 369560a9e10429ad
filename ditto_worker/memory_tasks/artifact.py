"""``artifacts/<taskId>.json``: building, checking and publishing a task's artifact.

The seed (memory-capabilities): "Artifacts are artifacts/<taskId>.json, including the
generated message, memory identity/version, language/style and task progress"; "Reports
commit before atomic file publication, so publishing retries do not repeat inference"
(SPEC.md MEM-TASK-1/4). The shape is :data:`ARTIFACT_SCHEMA_PATH` (JSON Schema 2020-12,
package data), checked before the report commits.

Publication is atomic: the JSON goes to a temporary file in the same folder, is fsynced,
renamed over ``<taskId>.json`` (``os.replace``) and the folder is fsynced, so a reader
sees the old file or the whole new one, never a part, and a crash leaves at most a
stray ``.<taskId>.json.*.tmp``.
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any, Final

from ditto_worker.errors import ErrorCode, NodeError

__all__ = ["ARTIFACT_SCHEMA_PATH", "artifact_schema", "check_artifact", "publish_artifact"]

ARTIFACT_SCHEMA_PATH: Final = Path(__file__).with_name("artifact.schema.json")
"""The artifact's JSON Schema (draft 2020-12), shipped with the package."""


@cache
def artifact_schema() -> dict[str, Any]:
    """The artifact's JSON Schema as data."""
    loaded: dict[str, Any] = json.loads(ARTIFACT_SCHEMA_PATH.read_text(encoding="utf-8"))
    return loaded


def check_artifact(artifact: Any) -> None:
    """Check an artifact against :func:`artifact_schema`.

    Raises:
        NodeError: ``INVALID_BACKEND_OUTPUT`` naming the rule that failed (the task built
            an artifact its own schema refuses: a bug, never published).
    """
    from jsonschema import Draft202012Validator

    error = next(iter(Draft202012Validator(artifact_schema()).iter_errors(artifact)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise NodeError(
            ErrorCode.INVALID_BACKEND_OUTPUT,
            f"the task's artifact does not match its schema at {where} ({error.validator})",
        )


def publish_artifact(directory: str | os.PathLike[str], task_id: str, artifact: Any) -> Path:
    """Write ``<directory>/<task_id>.json`` atomically (temp file + fsync + rename +
    directory fsync). Publishing the same artifact again gives the same file.
    Secret-shaped spans are redacted (``[redacted:<kind>]``) before anything is written.

    Returns:
        The artifact's path.

    Raises:
        OSError: the folder cannot be written (nothing half-written is left under the
            artifact's name).
    """
    from ditto_worker.memory_tasks.secret_shapes import redact_json

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{task_id}.json"
    data = json.dumps(redact_json(artifact), ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{task_id}.json.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(folder)
    return target


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory descriptors (Windows)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
