"""Admission figures: false admissions, true admissions, value accuracy (issue 25 item 9).

Runs a *decider* over the labelled conversations of ``bench/admission_set.json`` (written
for this project: durable preferences in English, Chinese, German, French, Spanish and
Japanese; revisions; one-offs; hypotheticals; questions; secrets; preferences stated only
by a system, assistant or tool turn; no preference at all). A decider takes the turns and
returns :class:`~ditto_worker.memory_tasks.policy.Decision` objects in conversation
order; for each field the *last* admitted decision wins (a revision overrides the earlier
preference), as the ``update`` task would apply it.

Deciders (``--decider``):

* ``naive`` — a deliberately over-eager keyword proposer: every sentence of *every* turn
  (system, assistant and tool included) × every policy value one of whose words occurs in
  it, plus an invented paraphrase per value ("Always use de.") — then code decides
  (:func:`~ditto_worker.memory_tasks.policy.admit`). Its "proposer alone" row is what
  would be stored if the proposals were trusted.
* ``write`` — the real ``write`` task with the offline model (or ``--base-url``):
  what the task *stored* is scored, and a ``search`` task checks the stored language is
  applied in its message (``bench/admission_task.py``).

Per conversation, with ``expected`` the labelled ``{field: value}``:

* false admission — a stored field that is not expected (any admission where none is);
* true admission — an expected field that was stored (rate over expected fields);
* value accuracy — stored value equals the expected one (over true admissions).

    python bench/admission.py                 # naive proposer: alone vs + policy
    python bench/admission.py --by-category   # one row per category as well
    python bench/admission.py --by-language   # one row per language as well
    python bench/admission.py --set bench/admission_musing_holdout.json  # musings (issue 35)
    python bench/admission.py --scaling       # admit() time vs message size (linear?)
    python bench/admission.py --decider write # the write task with the offline model
    python bench/admission.py --decider write --set bench/admission_holdout.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ditto_worker.memory_tasks.policy import (
    DEFAULT_POLICY,
    Decision,
    PreferencePolicy,
    Proposal,
    Turn,
    admit,
    turns_from_messages,
)
from ditto_worker.memory_tasks.sentences import sentence_spans

SET_PATH = Path(__file__).with_name("admission_set.json")

Decider = Callable[[Sequence[Turn]], list[Decision]]
"""``(turns) -> decisions`` in conversation order; the swap point for the model path."""


def naive_proposals(turns: Sequence[Turn], policy: PreferencePolicy) -> list[Proposal]:
    """Every (sentence of any turn) × (grounded value), plus one invented quote per value."""
    proposals: list[Proposal] = []
    for turn in turns:
        for start, end in sentence_spans(turn.content):
            sentence = turn.content[start:end]
            for name, values in policy.fields.items():
                for value in values:
                    if policy.grounding(name, value, sentence):
                        proposals.append(Proposal(name, value, sentence))
                        proposals.append(Proposal(name, value, f"Always use {value}."))
    return proposals


def trusting_decider(policy: PreferencePolicy = DEFAULT_POLICY) -> Decider:
    """The naive proposer with every proposal admitted: what trusting the model stores."""

    def decide(turns: Sequence[Turn]) -> list[Decision]:
        return [
            Decision(True, p.field, p.value, p.quote, ()) for p in naive_proposals(turns, policy)
        ]

    return decide


def naive_decider(policy: PreferencePolicy = DEFAULT_POLICY) -> Decider:
    """The naive proposer, each proposal decided by :func:`admit`."""

    def decide(turns: Sequence[Turn]) -> list[Decision]:
        return [admit(p, turns, policy) for p in naive_proposals(turns, policy)]

    return decide


DECIDERS: dict[str, Callable[[], Decider]] = {"naive": naive_decider}
"""Deciders by ``--decider`` name; the ``write`` task's model path registers here."""


@dataclass
class Tally:
    """Counts for one row of the report."""

    conversations: int = 0
    expected: int = 0
    false_admissions: int = 0
    true_admissions: int = 0
    right_values: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, expected: dict[str, str], decisions: Sequence[Decision]) -> None:
        """Scores one conversation's decisions against its ``expected`` values."""
        stored: dict[str, str] = {}
        for decision in decisions:
            if decision.admitted:
                stored[decision.field] = decision.value
            self.reasons.update(decision.reasons)
        self.conversations += 1
        self.expected += len(expected)
        self.false_admissions += sum(1 for f in stored if f not in expected)
        self.true_admissions += sum(1 for f in expected if f in stored)
        self.right_values += sum(1 for f, v in expected.items() if stored.get(f) == v)

    def row(self, name: str) -> str:
        """One printed line: counts, rates and ratios side by side."""
        true_rate = self.true_admissions / self.expected if self.expected else float("nan")
        accuracy = self.right_values / self.true_admissions if self.true_admissions else 0.0
        return (
            f"{name:<28} conv={self.conversations:>3}  false_admissions={self.false_admissions:>3}"
            f"  true_admissions={self.true_admissions:>3}/{self.expected:<3}"
            f" ({true_rate:6.1%})  value_accuracy={accuracy:6.1%}"
        )


def load_cases(path: Path = SET_PATH) -> list[dict[str, object]]:
    """The labelled conversations (see the module docstring for the fields)."""
    cases: list[dict[str, object]] = json.loads(path.read_text(encoding="utf-8"))
    return cases


def evaluate(
    cases: Sequence[dict[str, object]], decider: Decider
) -> tuple[Tally, dict[str, Tally]]:
    """Runs ``decider`` over ``cases``; the overall tally and one per category."""
    overall = Tally()
    by_category: dict[str, Tally] = {}
    for case in cases:
        turns = turns_from_messages(case["messages"])  # type: ignore[arg-type]
        expected = {e["field"]: e["value"] for e in case["expected"]}  # type: ignore[attr-defined]
        decisions = decider(turns)
        overall.add(expected, decisions)
        by_category.setdefault(str(case["category"]), Tally()).add(expected, decisions)
    return overall, by_category


SCALING_PIECES = ("Please always reply in German. ", "not Deutsch, ", "1 ", "e.g. ", "a@")
"""Repeated to build long messages: many sentences, one long clause, digit runs, dots."""


def scaling(sizes: Sequence[int] = (1_000, 10_000, 40_000)) -> None:
    """Prints the worst ``admit`` + ``find_secrets`` time per size and µs per character.

    Linear work shows as a flat µs/char column; a quadratic rule shows as one growing with
    the size (a 40 KB message of "Deutsch " took 170 s before the negation window).
    """
    import time

    from ditto_worker.memory_tasks.policy import find_secrets

    for size in sizes:
        worst = 0.0
        for piece in SCALING_PIECES:
            text = piece * (size // len(piece))
            turns = [Turn("user", text)]
            began = time.perf_counter()
            find_secrets(text)
            admit(Proposal("language", "de", text), turns)
            admit(Proposal("language", "de", text[:50]), turns)
            worst = max(worst, time.perf_counter() - began)
        per_char = worst * 1e6 / size
        print(f"scaling: {size:>6} chars  worst {worst * 1e3:8.1f} ms  {per_char:6.1f} µs/char")


def _write_rows(cases: Sequence[dict[str, object]], args: argparse.Namespace) -> int:
    """``--decider write``: the real ``write`` task with the model (bench/admission_task.py)."""
    from admission_task import write_task_decider

    with write_task_decider(args.base_url, args.model) as decider:
        decided, by_category = evaluate(cases, decider)
    alone = Tally()  # every proposal of the model stored, as if trusted
    for case, record in zip(cases, decider.records, strict=True):
        expected = {e["field"]: e["value"] for e in case["expected"]}  # type: ignore[attr-defined]
        alone.add(
            expected, [Decision(True, d.field, d.value, d.quote, ()) for d in record.proposed]
        )
    print(alone.row("model alone (trusted)"))
    print(decided.row("write task (model + policy)"))
    _by_category(args, by_category)
    print("rejections by reason:", dict(sorted(decided.reasons.items())))
    print(decider.summary())
    return 1 if decided.false_admissions else 0


def _by_category(args: argparse.Namespace, by_category: dict[str, Tally]) -> None:
    if args.by_category:
        for name, tally in sorted(by_category.items()):
            print(tally.row(f"  {name}"))


def _by_language(args: argparse.Namespace, cases: Sequence[dict[str, object]]) -> None:
    if args.by_language:
        for language in sorted({str(c["language"]) for c in cases}):
            mine = [c for c in cases if c["language"] == language]
            tally, _ = evaluate(mine, DECIDERS[args.decider]())
            print(tally.row(f"  language {language}"))


def _load() -> str:
    import os

    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the report; exit status 1 when the policy admitted anything it should not."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--decider", choices=[*sorted(DECIDERS), "write"], default="naive")
    parser.add_argument("--by-category", action="store_true")
    parser.add_argument("--by-language", action="store_true")
    parser.add_argument("--set", type=Path, default=SET_PATH)
    parser.add_argument("--scaling", action="store_true", help="time admit() on long input")
    parser.add_argument("--base-url", default=None, help="write: an OpenAI-compatible endpoint")
    parser.add_argument("--model", default="", help="write: the endpoint's model name")
    args = parser.parse_args(argv)
    if args.scaling:
        scaling()
        return 0
    cases = load_cases(args.set)
    print(f"admission set: {len(cases)} conversations ({args.set.name}); load average {_load()}")
    if args.decider == "write":
        status = _write_rows(cases, args)
        print(f"load average at end: {_load()}")
        return status
    alone, _ = evaluate(cases, trusting_decider())
    decided, by_category = evaluate(cases, DECIDERS[args.decider]())
    print(alone.row("proposer alone (trusted)"))
    print(decided.row(f"{args.decider} + policy (admit)"))
    _by_category(args, by_category)
    _by_language(args, cases)
    print("rejections by reason:", dict(sorted(decided.reasons.items())))
    return 1 if decided.false_admissions else 0


if __name__ == "__main__":
    sys.exit(main())
