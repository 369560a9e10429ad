"""The main job: a conversation into long-term memory through the fleet, and back.

The conversation is a LoCoMo-format file: in a source checkout ``data/locomo/30.json``
(LoCoMo, never packaged: its repository states no licence), else
:data:`SAMPLE_CONVERSATION`, a short conversation written for this project and installed
with the package (``ditto_worker/cli/samples/conversation.json``: 43 turns in 4 sessions,
20 questions with evidence ``dia_id`` labels and LoCoMo categories).

Every turn becomes one memory (content = the turn text; metadata = speaker, session, date,
dia_id, and the run id), written as MEMORY.WRITE batches on the ``memory.write`` queue;
then read back with MEMORY.GET and paged MEMORY.QUERY, every question sent through
MEMORY.SEARCH (strategy ``keyword``), a few records touched with MEMORY.UPDATE, and the
run's records removed with MEMORY.DELETE so runs do not pile up.

Evidence recall@k (LoCoMo, Maharana et al., ACL 2024): for each question with evidence,
the share of its evidence ``dia_id`` s among the top k results, averaged over questions.
"""

from __future__ import annotations

import json
import re
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

from tqdm import tqdm

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import DittoError
from ditto_worker.fleet.client import DittoClient

__all__ = [
    "SAMPLE_CONVERSATION",
    "Conversation",
    "DemoError",
    "DemoReport",
    "Question",
    "Turn",
    "evidence_recall",
    "load_conversation",
    "run_demo",
]


class DemoError(DittoError):
    """A node call of the demo did not succeed (its NodeResult error is in the message)."""


@dataclass(frozen=True)
class Turn:
    """One conversation turn: ``dia_id`` is ``D<session>:<turn>``."""

    dia_id: str
    speaker: str
    text: str
    session: int
    date: str
    caption: str = ""
    """The caption of the image the turn shares (LoCoMo ``blip_caption``), or ``""``."""


@dataclass(frozen=True)
class Question:
    """A LoCoMo question with its evidence dia_ids and category (1-5)."""

    question: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """A LoCoMo conversation: turns in session order and its questions."""

    name: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


SAMPLE_CONVERSATION: Final[Traversable] = (
    files("ditto_worker.cli") / "samples" / "conversation.json"
)
"""The packaged sample conversation (package data; readable wherever the wheel is installed)."""


def load_conversation(path: str | Path | Traversable) -> Conversation:
    """Read one LoCoMo-format conversation file (format: data/locomo/README.md).

    Args:
        path: a file path, or a package resource such as :data:`SAMPLE_CONVERSATION`.
    """
    path = Path(path) if isinstance(path, str) else path
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data)
    turns: list[Turn] = []
    sessions = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    for n in sessions:
        date = str(conv.get(f"session_{n}_date_time", ""))
        for t in conv[f"session_{n}"]:
            caption = str(t.get("blip_caption") or "")
            turns.append(Turn(t["dia_id"], t["speaker"], t["text"], n, date, caption))
    questions = tuple(
        Question(
            question=q["question"],
            evidence=tuple(e for ev in q.get("evidence", []) for e in re.split(r"[;\s]+", ev) if e),
            category=int(q.get("category", 0)),
        )
        for q in data.get("qa", [])
    )
    return Conversation(path.name, tuple(turns), questions)


def evidence_recall(found: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """Share of ``evidence`` among the first ``k`` of ``found`` (0.0-1.0)."""
    top = set(found[:k])
    return sum(1 for e in set(evidence) if e in top) / len(set(evidence))


@dataclass
class DemoReport:
    """What the demo measured. Latencies are client round trips in milliseconds; the recalls
    are ``None`` when no question has evidence (unknown, not 0)."""

    conversation: str
    turns: int
    questions: int
    recall_at_5: float | None
    recall_at_10: float | None
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)

    def latency_rows(self) -> Iterator[tuple[str, int, float, float]]:
        """(node, calls, p50 ms, p95 ms) per node, in node order."""
        for node, values in self.latencies_ms.items():
            ordered = sorted(values)
            p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
            yield node, len(values), statistics.median(ordered), p95


class _Caller:
    def __init__(self, client: DittoClient) -> None:
        self.client = client
        self.latencies: dict[str, list[float]] = defaultdict(list)

    def __call__(self, node: str, input: dict[str, Any]) -> Any:
        start = time.perf_counter()
        result: NodeResult[Any] = self.client.invoke(node, input)
        self.latencies[node].append((time.perf_counter() - start) * 1000)
        if result.status != "success" or result.error is not None:
            code = result.error.code if result.error else result.status
            message = result.error.message if result.error else ""
            raise DemoError(f"{node} {result.status}: {code} {message}")
        return result.output


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _write(call: _Caller, conv: Conversation, run: str, batch: int, progress: bool) -> list[str]:
    ids: list[str] = []
    with tqdm(total=len(conv.turns), desc="MEMORY.WRITE", unit="turn", disable=not progress) as bar:
        for chunk in _chunks(conv.turns, batch):
            drafts = [
                {
                    "key": f"demo:{run}:{t.dia_id}",
                    "content": t.text,
                    "metadata": {
                        "speaker": t.speaker,
                        "session": t.session,
                        "date": t.date,
                        "dia_id": t.dia_id,
                        "run": run,
                    },
                }
                for t in chunk
            ]
            ids.extend(item.id for item in call("MEMORY.WRITE", {"memories": drafts}))
            bar.update(len(chunk))
    return ids


def _read_back(call: _Caller, conv: Conversation, run: str, ids: list[str]) -> dict[str, str]:
    got = [i for chunk in _chunks(ids, 100) for i in call("MEMORY.GET", {"ids": list(chunk)})]
    by_key = call("MEMORY.GET", {"keys": [f"demo:{run}:{t.dia_id}" for t in conv.turns[:20]]})
    if [m.content for m in got] != [t.text for t in conv.turns] or len(by_key) != min(
        20, len(conv.turns)
    ):
        raise DemoError("MEMORY.GET did not return the written memories")
    paged: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page_input: dict[str, Any] = {"filter": {"run": run}, "limit": 100}
        if cursor:
            page_input["cursor"] = cursor
        page = call("MEMORY.QUERY", page_input)
        paged.extend(m.id for m in page.items)
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            break
    if paged != ids:
        raise DemoError("MEMORY.QUERY paging did not return the run's memories in order")
    return {
        "get": f"{len(got)}/{len(ids)} by id, {len(by_key)} by key",
        "query": f"{len(paged)} in {pages} pages",
    }


def _search(
    call: _Caller, conv: Conversation, run: str, ids: list[str]
) -> tuple[float | None, float | None]:
    """Mean keyword evidence recall@5 / @10 (``None``: no question has evidence — unknown,
    not 0)."""
    dia_by_id = dict(zip(ids, (t.dia_id for t in conv.turns), strict=True))
    asked = [q for q in conv.questions if q.evidence]
    r5 = r10 = 0.0
    for q in asked:
        hits = call(
            "MEMORY.SEARCH",
            {"query": q.question, "strategy": "keyword", "filter": {"run": run}, "limit": 10},
        )
        found = [dia_by_id.get(h.memory.id, "") for h in hits]
        r5 += evidence_recall(found, q.evidence, 5)
        r10 += evidence_recall(found, q.evidence, 10)
    if not asked:
        return None, None
    return r5 / len(asked), r10 / len(asked)


def run_demo(
    client: DittoClient,
    conversation: str | Path | Traversable,
    *,
    batch_size: int = 50,
    progress: bool = True,
    keep: bool = False,
    say: Callable[[str], None] = print,
) -> DemoReport:
    """Run the main job against ``client``'s fleet; returns the measured report.

    Raises:
        DemoError: a node call did not succeed, or a read-back did not match the writes.
    """
    conv = load_conversation(conversation)
    run = uuid.uuid4().hex[:12]
    call = _Caller(client)
    ids = _write(call, conv, run, batch_size, progress)
    checks = _read_back(call, conv, run, ids)
    r5, r10 = _search(call, conv, run, ids)
    sample = call("MEMORY.GET", {"ids": ids[:10]})
    updated = call(
        "MEMORY.UPDATE",
        {
            "memories": [
                {"id": m.id, "metadata": {**(m.metadata or {}), "reviewed": True}} for m in sample
            ]
        },
    )
    checks["update"] = f"{len(updated)} records"
    if not keep:
        deleted = [
            d
            for chunk in _chunks(ids, 500)
            for d in call("MEMORY.DELETE", {"ids": list(chunk)}).deleted
        ]
        checks["delete"] = f"{len(deleted)} records"
    asked = sum(1 for q in conv.questions if q.evidence)
    return DemoReport(conv.name, len(conv.turns), asked, r5, r10, dict(call.latencies), checks)
