"""Unknown is not zero, beyond INFER usage (issue 23 item 3; INFER: test_infer_usage.py).

Each case used to report or use a value it did not know as 0:

* a fleet call whose message size the transport did not give was measured as 0 bytes and
  so never refused by ``fleet.maxInputBytes``; now the input itself is measured;
* a search result without a score (MEM-DATA-2 allows it) was fused as if it scored 0 —
  the worst of a BM25 list, mid-table in a cosine one; now a list with an unscored result
  is fused by the source's ranking;
* ``ditto_worker.cli.eval`` and the demo reported recall 0.000 and latency 0.0 ms for a
  conversation with no question that has evidence; now ``None`` / ``unknown``;
* a local embedding model that did not report its dimensions got an identity of 0 dims
  (which a Qdrant collection would then fix); now ``EMBEDDING_UNAVAILABLE``.

``ditto-worker status`` (``test_status_table.py``) and INFER usage (``test_infer_usage.py``)
are tested with their modules.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from ditto_worker import create_memory, create_memory_worker
from ditto_worker.cli import demo
from ditto_worker.cli.eval import EvalReport, evaluate_strategy, format_reports
from ditto_worker.config import load_runtime_config
from ditto_worker.contracts import MemoryItem, MemorySearchResult, to_wire
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.fleet.redaction import input_repr
from ditto_worker.fleet.tasks import INPUT_BYTES, FleetRuntime
from ditto_worker.retrieval.pipeline import fuse_candidates
from ditto_worker.retrieval.settings import RetrievalConfig
from ditto_worker.testing import InMemoryMemoryStore
from tests.unit._spies import Spy


def _fleet_call(request: Any, input: Any) -> tuple[dict[str, Any], Spy]:
    spy = Spy()
    config = load_runtime_config({"fleet": {"maxInputBytes": 1024}}, env={})
    runtime = FleetRuntime(config, [lambda: create_memory_worker(spy)])
    reply = to_wire(runtime.run(SimpleNamespace(request=request, app=None), "MEMORY.QUERY", input))
    return reply, spy


def test_an_unknown_message_size_is_measured_not_taken_as_zero() -> None:
    big = {"filter": {"note": "x" * 2000}}
    for request in (
        SimpleNamespace(id="e1", headers={}),  # no size recorded at all
        SimpleNamespace(id="e2", headers={}, **{INPUT_BYTES: None}),  # size not known
    ):
        reply, spy = _fleet_call(request, big)
        assert reply["status"] == "failed" and reply["error"]["code"] == "INVALID_INPUT"
        assert "exceed the 1024-byte limit" in reply["error"]["message"]
        assert spy.calls == []
    small, spy = _fleet_call(SimpleNamespace(id="e3", headers={}), {"limit": 1})
    assert small["status"] == "success" and spy.calls
    # a known size is still what counts
    known, _ = _fleet_call(SimpleNamespace(id="e4", headers={}, **{INPUT_BYTES: 5000}), {})
    assert known["error"]["code"] == "INVALID_INPUT"
    assert input_repr(None) == "{'input': <redacted, message size unknown>}"


def _hit(key: str, score: float | None) -> MemorySearchResult:
    return MemorySearchResult(memory=MemoryItem(id=key, content=key), score=score)


def test_an_unscored_search_result_is_ranked_not_scored_zero() -> None:
    # the source ranked "a" first but gave it no score: it used to fuse as the worst (0)
    config = RetrievalConfig(fusion={"method": "weighted", "weights": {"keyword": 1}})
    keyword = [_hit("a", None), _hit("b", 5.0), _hit("c", 3.0)]
    scores, _ = fuse_candidates({"keyword": keyword}, config)
    assert scores == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.0})  # by rank, best first
    # cosine in [-1, 1]: an unknown score is not placed above the negative ones either
    vector = [_hit("x", 0.9), _hit("y", -0.2), _hit("z", None)]
    scores, _ = fuse_candidates({"vector": vector}, config.model_copy(
        update={"fusion": config.fusion.model_copy(update={"weights": {"vector": 1}})}
    ))  # fmt: skip
    assert scores["x"] > scores["y"] > scores["z"]  # it was: z (as 0) above y (-0.2)
    # fully scored lists are fused on their scores, as before
    scored, _ = fuse_candidates(
        {"keyword": [_hit("a", 4.0), _hit("b", 3.0), _hit("c", 0.0)]}, config
    )
    assert scored == pytest.approx({"a": 1.0, "b": 0.75, "c": 0.0})


def test_recall_and_latency_without_questions_are_unknown() -> None:
    turn = demo.Turn("D1:1", "Ann", "I like tea", 1, "1 May 2023")
    unasked = demo.Question("What does Ann like?", (), 4)  # no evidence: not measured
    conv = demo.Conversation("c0", (turn,), (unasked,))
    memory = create_memory(InMemoryMemoryStore())
    report = evaluate_strategy(memory, conv, {}, "keyword")
    assert report.questions == 0
    assert (report.recall_at_5, report.recall_at_10) == (None, None)
    assert (report.latency_p50_ms, report.latency_p95_ms) == (None, None)
    eval_report = EvalReport("c0", 1, 0.1, {"keyword": report})
    row = format_reports([eval_report]).splitlines()[1].split()
    assert row[:7] == ["c0", "keyword", "0", "unknown", "unknown", "unknown", "unknown"]
    assert demo._search(None, conv, "run", ["m1"]) == (None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("dims", [None, 0])
def test_an_embedding_model_without_dimensions_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, dims: int | None
) -> None:
    # its identity used to say dims 0 (``None or 0``), which a collection would then fix
    from ditto_worker.retrieval import embed

    class Model:
        def __init__(self, path: str, device: str) -> None:
            pass

        def get_embedding_dimension(self) -> int | None:
            return dims

    fake = SimpleNamespace(SentenceTransformer=Model)
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    monkeypatch.setattr(embed, "_quietly", lambda load, *a, **k: load(*a, **k))
    with pytest.raises(MemoryError) as info:
        embed.LocalEmbeddingProvider("/nowhere", model_name="fake")
    assert info.value.code == ErrorCode.EMBEDDING_UNAVAILABLE
    assert "does not report its dimensions" in info.value.safe_message
