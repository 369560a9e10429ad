"""Musings never become a durable preference, whatever the model proposes (issue 35 item 1).

Statements that only consider, wish, muse, ask, hedge or negate are decided by code
(:mod:`ditto_worker.memory_tasks.hedges`, :mod:`~ditto_worker.memory_tasks.durability`):
every proposal any model could make from them — every field, value and sentence — is
rejected, in en, zh, de, fr, es and ja; the bench sets (labelled, held-out, musing
held-out) show zero false admissions and every true one.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ditto_worker.memory_tasks import run_write
from ditto_worker.memory_tasks.hedges import holds_off, is_tentative
from ditto_worker.memory_tasks.policy import (
    DEFAULT_POLICY,
    Proposal,
    Turn,
    admit,
    candidate_sentences,
)
from tests.unit._task_kit import options, task_runtime
from tests.unit.test_memory_tasks_preferences import model, preferences, proposing

BENCH = Path(__file__).resolve().parents[2] / "bench"
MUSING = (
    "I've been wondering whether German might suit my updates better. "
    "I'm not sure, so please don't change anything yet."
)
"""The issue's case: a turn that only wonders about a language, hedges and asks for no
change (the offline model proposed language=de and the code admitted it, two runs of two)."""


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_admission", BENCH / "admission.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    return bench


def _every_proposal(turns: list[Turn]) -> list[Proposal]:
    """Every field × value × user sentence (with and without its index), and the turn."""
    texts = [(c.text, c.index) for c in candidate_sentences(turns)]
    texts += [(t.content, None) for t in turns if t.role == "user"]
    return [
        Proposal(name, value, text, index)
        for text, index in texts
        for name, values in DEFAULT_POLICY.fields.items()
        for value in values
    ]


def test_the_issues_musing_is_never_admitted_whatever_is_proposed() -> None:
    turns = [Turn("assistant", "How should I write to you?"), Turn("user", MUSING)]
    decisions = [admit(p, turns) for p in _every_proposal(turns)]
    assert decisions and not any(d.admitted for d in decisions)
    wondering = admit(Proposal("language", "de", MUSING.split(". ")[0] + ".", 0), turns)
    assert "not_durable_tentative" in wondering.reasons
    assert "not_durable_on_hold" in wondering.reasons


def test_the_write_task_stores_nothing_when_the_model_proposes_the_musing(
    tmp_path: Path,
) -> None:
    first = MUSING.split(". ")[0] + "."
    turns = [{"role": "user", "content": MUSING}]
    with model(proposing(first, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        outcome = run_write(
            runtime,
            {"request": {"taskId": "w1", "kind": "write", "conversation": turns}},
            options(tmp_path, allow_write=True),
        )
        assert outcome.status == "success", outcome.error
        assert outcome.artifact is not None
        admission = outcome.artifact["admission"]
        assert admission["decision"] == "rejected"
        assert outcome.artifact["mutation"] is None and preferences(runtime) == []


@pytest.mark.parametrize(
    ("sentence", "tentative", "hold"),
    [
        ("It might be nice to get the summaries in French.", True, False),
        ("Perhaps one day the reports could be in a table.", True, False),
        ("I'm not sure I'd want a formal tone.", True, False),
        ("Don't change anything yet.", False, True),
        ("也许用表格会好一点吧。", True, False),
        ("先不要改。", False, True),
        ("Vielleicht wären Antworten auf Englisch besser.", True, False),
        ("Bitte noch nichts ändern.", False, True),
        ("Peut-être que les résumés en anglais seraient mieux.", True, False),
        ("Ne change rien.", False, True),
        ("Tal vez las respuestas en inglés serían mejores.", True, False),
        ("No cambies nada.", False, True),
        ("返信はドイツ語のほうがいいかもしれません。", True, False),
        ("まだ変えないでください。", False, True),
        ("Please always reply in German.", False, False),
        ("请尽可能简短地回复。", False, False),
        ("Ab sofort bitte immer auf Französisch.", False, False),
    ],
)
def test_hedges_and_holds_per_language(sentence: str, tentative: bool, hold: bool) -> None:
    assert is_tentative(sentence) is tentative
    assert holds_off(sentence) is hold


def test_a_later_plain_statement_is_admitted_after_a_musing() -> None:
    turns = [
        Turn("user", "Maybe German would suit me better for the updates."),
        Turn("assistant", "Shall I switch?"),
        Turn("user", "Yes. From now on, write your updates in German."),
    ]
    later = "From now on, write your updates in German."
    assert admit(Proposal("language", "de", later), turns).admitted
    assert not admit(Proposal("language", "de", turns[0].content), turns).admitted


def test_a_later_request_for_no_change_holds_an_earlier_statement() -> None:
    turns = [
        Turn("user", "Always reply in German."),
        Turn("user", "Actually, don't change anything yet."),
    ]
    decision = admit(Proposal("language", "de", "Always reply in German."), turns)
    assert decision.reasons == ("not_durable_on_hold",)


@pytest.mark.parametrize("name", ["admission_set", "admission_holdout", "admission_musing_holdout"])
def test_every_set_has_no_false_admission_and_every_true_one(name: str) -> None:
    bench = _bench()
    cases = bench.load_cases(BENCH / f"{name}.json")
    decided, by_category = bench.evaluate(cases, bench.naive_decider())
    assert decided.false_admissions == 0
    assert decided.true_admissions == decided.expected
    assert decided.right_values == decided.true_admissions
    if "musing" in by_category:
        trusted, _ = bench.evaluate(
            [c for c in cases if c["category"] == "musing"], bench.trusting_decider()
        )
        assert trusted.false_admissions > 0  # the proposer alone would store musings


@pytest.mark.parametrize("name", ["admission_set", "admission_musing_holdout"])
def test_musings_are_labelled_in_every_rule_language(name: str) -> None:
    cases: list[dict[str, Any]] = json.loads((BENCH / f"{name}.json").read_text("utf-8"))
    musing = [c for c in cases if c["category"] == "musing"]
    assert {"en", "zh", "de", "fr", "es", "ja"} <= {c["language"] for c in musing}
    assert all(c["expected"] == [] for c in musing)
