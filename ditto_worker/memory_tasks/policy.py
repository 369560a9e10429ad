"""Admission of a proposed preference: the model proposes, code decides (issue 25).

The memory-capabilities seed's ``write`` task "admits only explicitly approved durable
communication preferences. A model proposes values and exact quotes; it cannot grant
storage permission." This module is that code (issue 25): no model, no I/O, pure.

Flow for the ``write``/``update`` tasks::

    turns = turns_from_messages(messages)            # [{role, content}] → Turn
    candidates = candidate_sentences(turns)          # user sentences only
    schema = proposal_schema(candidates, policy)     # INFER's JSON Schema (enums)
    proposals = proposals_from_json(model_output)    # → list[Proposal]
    decisions = [admit(p, turns, policy) for p in proposals]

:func:`admit` checks, in this order, and reports every failed check as a stable reason
code (:data:`REASONS`): the quote is verbatim in a *user* turn (never system, assistant or
tool text, even when the same words are there) and inside the candidate it names; the
field and value are in the allow-list; the value is grounded in the quote by one of its
words and not negated; the sentence asks something of the assistant's communication; it
is durable (not a one-off, a hypothetical, a question or a musing — :mod:`.durability`,
:mod:`.hedges` — and the user did not ask that nothing change); nothing in
the quote or value is secret-shaped (:mod:`.secret_shapes`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ditto_worker.memory_tasks.durability import (
    durability_reasons,
    has_preference_cue,
    negated,
)
from ditto_worker.memory_tasks.hedges import on_hold
from ditto_worker.memory_tasks.phrases import phrase_pattern
from ditto_worker.memory_tasks.secret_shapes import SECRET_KINDS, find_secrets
from ditto_worker.memory_tasks.sentences import (
    ROLES,
    Candidate,
    InvalidTurnError,
    Turn,
    candidate_sentences,
    sentence_spans,
    turns_from_messages,
)
from ditto_worker.memory_tasks.vocabulary import DEFAULT_VOCABULARY

__all__ = [
    "DEFAULT_POLICY",
    "REASONS",
    "ROLES",
    "SECRET_KINDS",
    "Candidate",
    "Decision",
    "InvalidTurnError",
    "PolicyError",
    "PreferencePolicy",
    "Proposal",
    "Turn",
    "admit",
    "candidate_sentences",
    "find_secrets",
    "proposal_schema",
    "proposals_from_json",
    "turns_from_messages",
]

REASONS: Mapping[str, str] = MappingProxyType(
    {
        "quote_empty": "the quote is empty",
        "quote_not_verbatim": "the quote is not a verbatim part of the conversation",
        "quote_not_from_user": "the quote comes from a system, assistant or tool turn",
        "quote_not_in_candidate": "the quote is not inside the candidate sentence named",
        "field_not_in_policy": "the field is not in the policy's allow-list",
        "value_not_in_policy": "the value is not allowed for this field",
        "value_not_grounded": "no word of the quote names this value",
        "value_negated": "the quote rejects this value (a negation before it)",
        "no_preference": "the sentence asks nothing of the assistant's communication",
        "not_durable_one_off": "a one-off request (this message, this time, today …)",
        "not_durable_hypothetical": "a hypothetical or conditional statement",
        "not_durable_question": "a question, not a statement of preference",
        "not_durable_tentative": "only considered, wished, mused or hedged (maybe, I wonder …)",
        "not_durable_on_hold": "the user asked that nothing be changed (don't change anything …)",
        "not_durable_policy": "a phrase the application's policy marks as not durable",
        "secret": "the quote or value holds secret-shaped text",
    }
)
"""Every reason code :func:`admit` can give, with its human message, in check order."""


class PolicyError(ValueError):
    """A policy table is malformed (an empty field, value or grounding list)."""


@dataclass(frozen=True, slots=True)
class PreferencePolicy:
    """The allow-list: fields, their values and the words that ground each value.

    Attributes:
        fields: ``{field: {value: grounding phrases}}``, e.g.
            ``{"language": {"de": ("German", "Deutsch", "德语", …)}}``. Default:
            :data:`DEFAULT_POLICY` (``vocabulary.DEFAULT_VOCABULARY``: fields
            ``language`` (BCP-47 codes), ``tone``, ``format``, ``length``).
        rules: an application's added checks (``policy_config.PolicyRules``), or None.
    """

    fields: Mapping[str, Mapping[str, tuple[str, ...]]]
    rules: Any = None
    _patterns: Mapping[tuple[str, str], re.Pattern[str]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        frozen: dict[str, Mapping[str, tuple[str, ...]]] = {}
        patterns: dict[tuple[str, str], re.Pattern[str]] = {}
        if not self.fields:
            raise PolicyError("a policy needs at least one field")
        for name, values in self.fields.items():
            if not name or not values:
                raise PolicyError(f"field {name!r} needs at least one value")
            for value, words in values.items():
                if not value or not words or not all(w.strip() for w in words):
                    raise PolicyError(f"{name}={value!r} needs non-empty grounding words")
                patterns[(name, value)] = phrase_pattern(words)
            frozen[name] = MappingProxyType({v: tuple(w) for v, w in values.items()})
        object.__setattr__(self, "fields", MappingProxyType(frozen))
        object.__setattr__(self, "_patterns", MappingProxyType(patterns))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Mapping[str, Sequence[str]]]) -> PreferencePolicy:
        """Builds a policy from plain data (e.g. a YAML or JSON document).

        Raises:
            PolicyError: a field without values, a value without grounding words.
        """
        return cls({f: {v: tuple(w) for v, w in vals.items()} for f, vals in data.items()})

    def extra_reasons(self, quote: str, contexts: Sequence[str]) -> list[str]:
        """Reason codes of the application's :attr:`rules` (none without rules)."""
        return [] if self.rules is None else list(self.rules.reasons(quote, contexts))

    def allows(self, field_name: str, value: str) -> bool:
        """True when ``value`` is allowed for ``field_name``."""
        return value in self.fields.get(field_name, {})

    def grounding(self, field_name: str, value: str, text: str) -> list[int]:
        """Start offsets in ``text`` of the words grounding ``field_name=value`` (sorted)."""
        pattern = self._patterns.get((field_name, value))
        return [] if pattern is None else [m.start() for m in pattern.finditer(text)]


DEFAULT_POLICY = PreferencePolicy(DEFAULT_VOCABULARY)
"""The default allow-list (:mod:`ditto_worker.memory_tasks.vocabulary`)."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """What the model proposes: a preference and the user's words for it.

    Attributes:
        field: a policy field, e.g. ``"language"``.
        value: a value of that field, e.g. ``"de"``.
        quote: the user's exact words (a candidate text under :func:`proposal_schema`).
        candidate_index: the :class:`Candidate` the quote is taken from, or ``None``.
    """

    field: str
    value: str
    quote: str
    candidate_index: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The code's decision on one :class:`Proposal`.

    Attributes:
        admitted: True only when ``reasons`` is empty.
        field, value, quote: the proposal's, unchanged (a rejected secret is still
            never stored: only an admitted decision is written).
        reasons: reason codes from :data:`REASONS`, in check order; empty when admitted.
    """

    admitted: bool
    field: str
    value: str
    quote: str
    reasons: tuple[str, ...]

    @property
    def message(self) -> str:
        """A human sentence: "admitted", or each reason's message joined by "; "."""
        if self.admitted:
            return "admitted: an explicit durable preference within policy"
        return "; ".join(REASONS[r] for r in self.reasons)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form for artifacts: the quote is omitted when a secret was found."""
        return {
            "admitted": self.admitted,
            "field": self.field,
            "value": self.value,
            "quote": None if "secret" in self.reasons else self.quote,
            "reasons": list(self.reasons),
            "message": self.message,
        }


def _covering(sentences: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """The span from the first to the last sentence overlapping ``[start, end)``."""
    i = max(bisect.bisect_right(sentences, (start, start)) - 1, 0)
    lo, hi = start, end
    while i < len(sentences) and sentences[i][0] < end:
        a, b = sentences[i]
        if b > start:
            lo, hi = min(lo, a), max(hi, b)
        i += 1
    return lo, hi


def _contexts(quote: str, turns: Sequence[Turn], role: str) -> list[str]:
    """The sentences of ``role`` turns overlapping each verbatim occurrence of ``quote``."""
    found: dict[str, None] = {}  # an ordered set
    for turn in turns:
        if turn.role != role or quote not in turn.content:
            continue
        sentences = list(sentence_spans(turn.content))
        spans: dict[tuple[int, int], None] = {}
        start = turn.content.find(quote)
        while start >= 0:
            spans[_covering(sentences, start, start + len(quote))] = None
            start = turn.content.find(quote, start + 1)
        found.update((turn.content[lo:hi], None) for lo, hi in spans)
    return list(found)


def _source_reasons(proposal: Proposal, turns: Sequence[Turn]) -> tuple[list[str], list[str]]:
    """Reasons about where the quote comes from, and the user sentences it sits in."""
    quote = proposal.quote
    if not quote.strip():
        return ["quote_empty"], []
    contexts = _contexts(quote, turns, "user")
    if not contexts:
        others = any(quote in t.content for t in turns if t.role != "user")
        return ["quote_not_from_user" if others else "quote_not_verbatim"], []
    if proposal.candidate_index is not None:
        candidates = candidate_sentences(turns)
        index = proposal.candidate_index
        if not 0 <= index < len(candidates) or quote not in candidates[index].text:
            return ["quote_not_in_candidate"], contexts
        contexts = [candidates[index].text]
    return [], contexts


def _negated_in(quote: str, starts: Sequence[int], contexts: Sequence[str]) -> bool:
    """True when the value's words are negated in the quote or in a sentence around it.

    A fragment cut out of "Please don't reply in German" must not drop the negation, so
    each word is also judged at the quote's place in each sentence that holds it.
    """
    if all(negated(quote, starts)):
        return True
    for context in contexts:
        at = context.find(quote)
        if at >= 0 and all(negated(context, [at + s for s in starts])):
            return True
    return False


def _value_reasons(
    proposal: Proposal, policy: PreferencePolicy, contexts: Sequence[str]
) -> list[str]:
    if proposal.field not in policy.fields:
        return ["field_not_in_policy"]
    if not policy.allows(proposal.field, proposal.value):
        return ["value_not_in_policy"]
    starts = policy.grounding(proposal.field, proposal.value, proposal.quote)
    if not starts:
        return ["value_not_grounded"]
    if _negated_in(proposal.quote, starts, contexts):
        return ["value_negated"]
    return []


def _statement_reasons(contexts: Sequence[str]) -> list[str]:
    reasons: list[str] = []
    if contexts and not all(has_preference_cue(c) for c in contexts):
        reasons.append("no_preference")
    for context in contexts:
        for reason in durability_reasons(context):
            if reason not in reasons:
                reasons.append(reason)
    return reasons


def admit(
    proposal: Proposal, turns: Sequence[Turn], policy: PreferencePolicy = DEFAULT_POLICY
) -> Decision:
    """Decides whether ``proposal`` may be stored as a durable communication preference.

    Args:
        proposal: the model's proposal (field, value, quote, candidate index).
        turns: the whole conversation the proposal was made from (all roles).
        policy: the allow-list; :data:`DEFAULT_POLICY` by default.

    Returns:
        A :class:`Decision`; ``admitted`` only when no check failed. Every failed check
        adds its code (:data:`REASONS`) in check order. Durability is judged on the whole
        user sentence(s) the quote lies in (every verbatim occurrence must pass); grounding
        on the quote itself; negation on the quote and at its place in those sentences.
    """
    source, contexts = _source_reasons(proposal, turns)
    value = _value_reasons(proposal, policy, contexts)
    reasons = source + value + _statement_reasons(contexts)
    if on_hold(proposal.quote, [t.content for t in turns if t.role == "user"]):
        reasons.append("not_durable_on_hold")
    if find_secrets(proposal.quote) or find_secrets(proposal.value):
        reasons.append("secret")
    reasons += policy.extra_reasons(proposal.quote, contexts)
    ordered = tuple(code for code in REASONS if code in reasons)
    return Decision(not ordered, proposal.field, proposal.value, proposal.quote, ordered)


def proposal_schema(
    candidates: Sequence[Candidate],
    policy: PreferencePolicy = DEFAULT_POLICY,
    *,
    max_proposals: int = 4,
) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) for INFER's output: ``{"proposals": [...]}``.

    Each proposal is ``{candidate_index, quote, field, value}``; ``quote`` is limited to
    the candidate texts (``enum``), ``candidate_index`` to 0..n-1, and ``field``/``value``
    to the policy (one ``anyOf`` branch per field: ``field`` is a ``const`` and ``value``
    an ``enum`` of that field's values). An empty ``proposals`` list means "no
    preference"; with no candidates the list must be empty (``maxItems: 0``).

    Args:
        candidates: from :func:`candidate_sentences`.
        policy: the allow-list.
        max_proposals: ``maxItems`` of the list (≥ 0).
    """
    if not candidates:
        items: dict[str, Any] = {}
        max_proposals = 0
    else:
        branches = [
            {
                "type": "object",
                "properties": {
                    "candidate_index": {"type": "integer", "enum": [c.index for c in candidates]},
                    "quote": {
                        "type": "string",
                        "enum": list(dict.fromkeys(c.text for c in candidates)),
                    },
                    "field": {"const": name},
                    "value": {"type": "string", "enum": list(values)},
                },
                "required": ["candidate_index", "quote", "field", "value"],
                "additionalProperties": False,
            }
            for name, values in policy.fields.items()
        ]
        items = {"anyOf": branches}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"proposals": {"type": "array", "items": items, "maxItems": max_proposals}},
        "required": ["proposals"],
        "additionalProperties": False,
    }


def proposals_from_json(data: object) -> list[Proposal]:
    """Proposals from INFER's parsed output (``{"proposals": [...]}``, see the schema).

    Entries that are not objects with string ``field``/``value``/``quote`` are skipped
    (the schema already rules them out; this is defence in depth, never a repair);
    ``candidate_index`` is kept when it is an ``int`` (not a bool), else ``None``.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("proposals"), list):
        return []
    out: list[Proposal] = []
    for item in data["proposals"]:
        if not isinstance(item, Mapping):
            continue
        f, v, q = item.get("field"), item.get("value"), item.get("quote")
        if not (isinstance(f, str) and isinstance(v, str) and isinstance(q, str)):
            continue
        index = item.get("candidate_index")
        ok = isinstance(index, int) and not isinstance(index, bool)
        out.append(Proposal(f, v, q, index if ok else None))
    return out
