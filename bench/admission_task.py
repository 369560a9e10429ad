"""The ``write`` task as a decider of ``bench/admission.py`` (issue 25 item 9).

Each labelled conversation goes through the real ``run_write`` — the model proposes,
code decides, the task stores — on one SQLite database (a user per conversation, so no
conversation sees another's preference). What the task *stored* (its mutation's records)
is scored, not what it would have liked to store. When a language was stored, a
``search`` task for that user checks the language is applied in its message (the
artifact's ``applied.language`` and the language identifier's check).

The model is the packaged local model (started here, default settings) or the
OpenAI-compatible endpoint of ``--base-url`` / ``DITTO_WORKER_INFER_BASE_URL``.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ditto_worker import create_context_worker, create_ditto, create_infer_worker
from ditto_worker.memory_tasks import TaskOptions, open_memory_storage, run_search, run_write
from ditto_worker.memory_tasks.policy import Decision, Turn


@dataclass
class TaskRecord:
    """What the task did with one conversation."""

    proposed: list[Decision]
    stored: dict[str, str]
    status: str
    language: str | None = None
    applied: bool | None = None


@dataclass
class WriteTaskDecider:
    """``(turns) -> decisions`` through ``run_write``; see the module docstring.

    Attributes:
        records: one :class:`TaskRecord` per conversation, in order.
        infer_calls: INFER calls made (proposals, messages, searches).
    """

    runtime: Any
    directory: Path
    records: list[TaskRecord] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    def __call__(self, turns: Sequence[Turn]) -> list[Decision]:
        n = len(self.records)
        user = f"case-{n}"
        opts = TaskOptions("acme", user, self.directory / "artifacts", allow_write=True)
        conversation = [{"role": t.role, "content": t.content} for t in turns]
        request = {"taskId": f"w-{n}", "kind": "write", "conversation": conversation}
        outcome = run_write(self.runtime, {"request": request}, opts)
        artifact = outcome.artifact or {}
        admission = artifact.get("admission") or {}
        proposed = [_decision(p) for p in admission.get("proposals", [])]
        records = (artifact.get("mutation") or {}).get("records", [])
        stored = {r["field"]: r["value"] for r in records}
        error = (outcome.error or {}).get("code", "")
        record = TaskRecord(proposed, stored, f"{outcome.status} {error}".strip())
        if "language" in stored:
            record.language = stored["language"]
            record.applied = self._applied(user, n, stored["language"])
        self.records.append(record)
        self.statuses[record.status] += 1
        # what the task stored is what counts: a decision is "admitted" here only when
        # its (field, value) was written
        return [
            Decision(d.admitted and stored.get(d.field) == d.value, d.field, d.value, d.quote,
                     d.reasons or (() if stored.get(d.field) == d.value else ("not_stored",)))
            for d in proposed
        ]  # fmt: skip

    def _applied(self, user: str, n: int, language: str) -> bool:
        opts = TaskOptions("acme", user, self.directory / "artifacts")
        request = {"taskId": f"s-{n}", "kind": "search"}
        outcome = run_search(self.runtime, {"request": request}, opts)
        artifact = outcome.artifact or {}
        check = artifact.get("languageCheck") or {}
        return bool(
            outcome.status == "success"
            and (artifact.get("applied") or {}).get("language") == language
            and check.get("passed")
        )

    def summary(self) -> str:
        """The language line and the task statuses."""
        languages = [r for r in self.records if r.language is not None]
        applied = sum(1 for r in languages if r.applied)
        rate = applied / len(languages) if languages else float("nan")
        return (
            f"language applied in the search message: {applied}/{len(languages)} ({rate:.1%})"
            f"\nwrite task statuses: {dict(self.statuses)}"
        )


def _decision(data: dict[str, Any]) -> Decision:
    return Decision(bool(data["admitted"]), data["field"], data["value"],
                    data.get("quote") or "", tuple(data.get("reasons", [])))  # fmt: skip


@contextmanager
def write_task_decider(base_url: str | None = None, model: str = "") -> Iterator[WriteTaskDecider]:
    """A :class:`WriteTaskDecider` over a fresh SQLite file and the model (see the module
    docstring); prints where the model comes from and its start time."""
    base_url = base_url or os.environ.get("DITTO_WORKER_INFER_BASE_URL") or None
    with ExitStack() as stack:
        if base_url:
            model = model or os.environ.get("DITTO_WORKER_INFER_MODEL", "")
            print(f"model: the endpoint at {base_url.split('@')[-1]} ({model or 'default'})")
        else:
            from ditto_worker.infer.local import LocalModelServer

            began = time.perf_counter()
            server = stack.enter_context(LocalModelServer.start())
            base_url, model = server.base_url, server.model
            print(f"model: the packaged local model {model} (started in "
                  f"{time.perf_counter() - began:.1f} s, default settings)")  # fmt: skip
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="admission-")))
        storage = open_memory_storage("sqlite", directory)
        stack.callback(storage.close)
        infer = create_infer_worker({"baseUrl": base_url, "model": model or "default"},
                                    env={}, dotenv_path=None)  # fmt: skip
        workers = [*storage.workers, create_context_worker(), infer]
        runtime = stack.enter_context(create_ditto(workers=workers))
        yield WriteTaskDecider(runtime, directory)
