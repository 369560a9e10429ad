"""Preferences in long-term memory: recall, the progress message that applies them, and
the proposal a ``write`` / ``update`` task asks the model for (SPEC.md MEM-TASK-2/3).

A preference is one record per policy field in the ``memory`` space: key
``preference:<field>``, content ``{field, value, statement}`` (the statement is the
user's admitted quote; the field name makes every preference match the recall query in
keyword search), metadata ``{kind: "preference", field, value, version, quote,
operationId, taskId}``. ``version`` starts at 1 and grows by one per admitted revision.

* :func:`recall` — MEMORY.SEARCH with the task's own filter ``{kind: preference}`` (no
  caller can widen it; a result that is not a well-formed preference of the policy is
  dropped) beside CONTEXT.LOAD of the working context ``preferences``; a cache miss (or
  a stale cache) is restored from the database with CONTEXT.UPDATE.
* :func:`progress_message` — INFER.GENERATE writes the project progress message in the
  remembered language and style; code checks the language (:func:`~ditto_worker.
  memory_tasks.language.is_in_language`) and asks again up to ``model.attempts`` times,
  then fails ``INFER_INVALID_OUTPUT``; a message in the language that reports a stage
  done the request does not, or cites a memory not used
  (:mod:`~ditto_worker.memory_tasks.message_check`), is asked once more, then replaced
  by a message built from the request's facts (``generated: false``). The citation
  ``(memory <id> v<version>)`` is appended by code, never left to the model.
* :func:`propose` — candidate sentences (user turns only) chosen by code, the model's
  proposal constrained by :func:`~ditto_worker.memory_tasks.policy.proposal_schema`,
  every proposal decided by :func:`~ditto_worker.memory_tasks.policy.admit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory_tasks.contracts import LANGUAGE_NAMES
from ditto_worker.memory_tasks.steps import Plan, TaskRun, ask, require
from ditto_worker.runtime.graphs import graph

__all__ = [
    "CONTEXT_NAME",
    "RECALL_QUERY",
    "preference_key",
    "progress_message",
    "propose",
    "recall",
]

RECALL_QUERY: Final = "communication preference language tone format length"
"""The recall query: every preference's content names its field, one of these words."""
CONTEXT_NAME: Final = "preferences"
"""The cached working context of the user's preferences (CONTEXT cache mode)."""
_RECALL_LIMIT: Final = 20


def preference_key(field: str) -> str:
    """The record key of a preference field: ``preference:<field>``."""
    return f"preference:{field}"


def _is_preference(item: Any, fields: Mapping[str, Any]) -> bool:
    metadata = item.get("metadata") if isinstance(item, Mapping) else None
    if not isinstance(metadata, Mapping) or metadata.get("kind") != "preference":
        return False
    field, value, version = metadata.get("field"), metadata.get("value"), metadata.get("version")
    return (
        isinstance(field, str)
        and field in fields
        and isinstance(value, str)
        and value in fields[field]
        and isinstance(version, int)
        and not isinstance(version, bool)
        and version >= 1
    )


def cited(item: Mapping[str, Any]) -> dict[str, Any]:
    """The artifact's ``memories`` entry of a preference record."""
    meta = item["metadata"]
    return {"id": item["id"], "key": item.get("key"), "version": meta["version"],
            "field": meta["field"], "value": meta["value"]}  # fmt: skip


def _context_items(memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": f"memory:{m['id']}",
            "sourceNode": "MEMORY.SEARCH",
            "content": f"{m['field']}: {m['value']}",
            "metadata": {"memoryId": m["id"], "version": m["version"]},
        }
        for m in memories
    ]


def recall(run: TaskRun, fields: Mapping[str, Any]) -> Plan:
    """Recall the user's preferences (see the module docstring).

    Returns:
        ``(memories, context)``: the cited preferences, one per field (highest version),
        and ``{cacheHit, restored, version}`` of the working context.

    Raises:
        NodeError: SEARCH or the context cache failed (its code; no fallback).
    """
    search = {"query": RECALL_QUERY, "filter": {"kind": "preference"}, "limit": _RECALL_LIMIT}
    step = (
        graph("recall")
        .node("search", "MEMORY.SEARCH", [], lambda _: search)
        .node("context", "CONTEXT.LOAD", [], lambda _: {"name": CONTEXT_NAME})
    )
    done = yield step, None
    found = [r["memory"] for r in require(done, "search")]
    loaded = require(done, "context")
    best: dict[str, dict[str, Any]] = {}
    for item in found:
        if _is_preference(item, fields):
            memory = cited(item)
            if memory["field"] not in best or memory["version"] > best[memory["field"]]["version"]:
                best[memory["field"]] = memory
    memories = sorted(best.values(), key=lambda m: str(m["field"]))
    items = _context_items(memories)
    cached = [(i["id"], (i.get("metadata") or {}).get("version")) for i in loaded["items"]]
    fresh = [(i["id"], i["metadata"]["version"]) for i in items]
    context = {"cacheHit": bool(loaded["found"]), "restored": False,
               "version": loaded["version"]}  # fmt: skip
    if not loaded["found"] or cached != fresh:
        body = {"name": CONTEXT_NAME, "ingress": items}
        update = graph("restore-context").node("update", "CONTEXT.UPDATE", [], lambda _: body)
        restored = require((yield update, None), "update")
        context.update(restored=True, version=restored["version"])
        run.say("context: restored from the database")
    return memories, context


def _language_of(memories: list[dict[str, Any]]) -> str:
    for memory in memories:
        if memory["field"] == "language" and memory["value"] in LANGUAGE_NAMES:
            return str(memory["value"])
    return "en"


def _message_schema(language: str) -> dict[str, Any]:
    text: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 400}
    if language in ("zh", "ja"):  # the offline model writes the script only when forced
        text["pattern"] = "^[^A-Za-z]+$"
    return {"type": "object", "properties": {"message": text}, "required": ["message"],
            "additionalProperties": False}  # fmt: skip


def _message_prompt(run: TaskRun, applied: Mapping[str, str]) -> list[dict[str, str]]:
    name = LANGUAGE_NAMES[applied["language"]]
    style = ", ".join(f"{k}: {v}" for k, v in applied.items() if k != "language")
    system = (
        f"Write a short project progress update in {name}"
        + (f" ({style})" if style else "")
        + '. Reply with JSON {"message": ...}.'
    )
    stages = "; ".join(f"{s.name}: {s.status}" for s in run.request.stages)
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Project {run.request.project}. {stages}"}]  # fmt: skip


def progress_message(run: TaskRun, memories: list[dict[str, Any]]) -> Plan:
    """The progress message applying ``memories`` (see the module docstring).

    The language is checked as before (``model.attempts`` asks, then
    ``INFER_INVALID_OUTPUT``); a reply in the language that fails
    :func:`~ditto_worker.memory_tasks.message_check.message_problems` (a stage reported
    done that is not, a memory cited that was not used) is asked once more with the
    problems named, then replaced by :func:`~ditto_worker.memory_tasks.message_check.
    fallback_message` (``generated: false``).

    Returns:
        ``{message, applied, languageCheck, generated}`` for the artifact.

    Raises:
        NodeError: ``INFER_INVALID_OUTPUT`` when no attempt is in the language;
            INFER's own codes when a call fails.
    """
    from ditto_worker.memory_tasks.language import detect_language, is_in_language
    from ditto_worker.memory_tasks.message_check import message_problems

    applied = {"language": _language_of(memories)}
    applied.update({m["field"]: m["value"] for m in memories if m["field"] != "language"})
    messages = _message_prompt(run, applied)
    language = applied["language"]
    refused = False
    for attempt in range(1, run.model.attempts + 1):
        reply = yield from ask(run, "infer-message", messages, _message_schema(language))
        text = str(reply.get("message", "")).strip() if isinstance(reply, Mapping) else ""
        if not (text and is_in_language(text, language)):
            run.say(f"message: attempt {attempt} is not in {LANGUAGE_NAMES[language]}")
            continue
        problems = message_problems(text, run.request.project, run.request.stages, memories)
        if not problems or refused:
            check = {"language": language, "detected": detect_language(text),
                     "passed": True, "attempts": attempt}  # fmt: skip
            return _made(run, text if not problems else None, memories, applied, check)
        refused = True
        run.say("message: the model's message failed a check; asking once more")
        fix = f"Your message was refused: {'; '.join(problems)}. Write it again."
        messages = [*messages, {"role": "assistant", "content": text},
                    {"role": "user", "content": fix}]  # fmt: skip
    if refused:  # in the language once, wrong facts, then not in the language
        check = {"language": language, "detected": None, "passed": False,
                 "attempts": run.model.attempts}  # fmt: skip
        return _made(run, None, memories, applied, check)
    raise NodeError(
        ErrorCode.INFER_INVALID_OUTPUT,
        f"the model's message was not in {LANGUAGE_NAMES[language]} after "
        f"{run.model.attempts} attempts",
    )


def _made(
    run: TaskRun,
    text: str | None,
    memories: list[dict[str, Any]],
    applied: dict[str, str],
    check: dict[str, Any],
) -> dict[str, Any]:
    """The message stage's output: ``text`` (the model's, checked) or, when ``None``, the
    fallback built from the request's facts, then code's citation of every memory used."""
    from ditto_worker.memory_tasks.language import detect_language, is_in_language
    from ditto_worker.memory_tasks.message_check import citation, fallback_message

    generated = text is not None
    if text is None:
        text = fallback_message(run.request.project, run.request.stages, applied["language"])
        check = {**check, "detected": detect_language(text),
                 "passed": is_in_language(text, applied["language"])}  # fmt: skip
        run.say("message: built from the request's facts (generated: false)")
    message = f"{text} {citation(memories)}".strip()
    return {"message": message, "applied": applied, "languageCheck": check,
            "generated": generated}  # fmt: skip


_PROPOSE_SYSTEM = (
    "Pick the user's durable communication preferences from the numbered sentences. "
    "After each sentence, -> lists the field=value pairs the policy could store from it. "
    "Propose only listed pairs, the quote being that sentence exactly. "
    'Reply JSON {"proposals": [{candidate_index, quote, field, value}]}; '
    "an empty list when there is none."
)


def admissible_options(candidates: list[Any], turns: Any, policy: Any) -> dict[int, list[str]]:
    """Per candidate index, the ``field=value`` pairs :func:`~ditto_worker.memory_tasks.
    policy.admit` would admit with that sentence as the quote (its words name the value,
    the sentence is durable, not negated, not secret …).

    Code-side candidate selection (issue 25 item 9): the offline model, shown the numbered
    sentences alone, proposed a wrong field or value for most durable ones ("keep your
    status updates short" -> format=bullets); the prompt lists the sentences that have
    pairs, each with its pairs, and the schema's quotes are those sentences (all user
    sentences when none has a pair). Every policy field and value stays in the schema
    and every proposal is decided by ``admit`` as before.
    """
    from ditto_worker.memory_tasks import policy as rules

    options: dict[int, list[str]] = {}
    for c in candidates:
        pairs = [
            (name, value)
            for name, values in policy.fields.items()
            for value in values
            if policy.grounding(name, value, c.text)
        ]
        options[c.index] = [
            f"{name}={value}"
            for name, value in pairs
            if rules.admit(rules.Proposal(name, value, c.text, c.index), turns, policy).admitted
        ]
    return _latest_per_field(options)


def _latest_per_field(options: dict[int, list[str]]) -> dict[int, list[str]]:
    """Each field's pairs kept on its last sentence only: a later statement revises an
    earlier one (the task stores the last admitted per field), and the offline model,
    offered both, proposed the first (a revision stored the superseded value)."""
    last: dict[str, int] = {}
    for index, pairs in options.items():
        for pair in pairs:
            last[pair.split("=", 1)[0]] = index
    return {index: [p for p in pairs if last[p.split("=", 1)[0]] == index]
            for index, pairs in options.items()}  # fmt: skip


def _listing(candidates: list[Any], options: dict[int, list[str]]) -> str:
    """The numbered sentences that have admissible pairs, each with its pairs (the offline
    model, shown a first sentence marked "none", proposed nothing for the ones after it)."""
    lines = [f"{c.index}. {c.text} -> {', '.join(options[c.index])}"
             for c in candidates if options[c.index]]  # fmt: skip
    return "\n".join(lines) or "(no sentence states a durable preference)"


def propose(run: TaskRun, policy: Any) -> Plan:
    """Ask the model for proposals and decide each in code.

    Returns:
        ``[Decision.to_json(), …]`` in conversation order of their quotes (empty when it
        proposed none).

    Raises:
        NodeError: INFER failed; ``INVALID_INPUT`` for a malformed conversation.
    """
    from ditto_worker.memory_tasks import policy as rules

    try:
        turns = rules.turns_from_messages(
            [t.model_dump() for t in run.request.conversation]
        )  # fmt: skip
    except rules.InvalidTurnError as exc:
        raise NodeError(ErrorCode.INVALID_INPUT, f"Invalid input: conversation: {exc}") from None
    candidates = rules.candidate_sentences(turns)
    options = admissible_options(candidates, turns, policy)
    messages = [{"role": "system", "content": _PROPOSE_SYSTEM},
                {"role": "user", "content": _listing(candidates, options)}]  # fmt: skip
    # the schema offers the listed sentences only (every user sentence when none is
    # listed): the offline model quoted "Hi!" for the third sentence's value whenever the
    # enum held it; admit() still decides every proposal
    offered = [c for c in candidates if options[c.index]] or candidates
    reply = yield from ask(run, "infer-proposal", messages, rules.proposal_schema(offered, policy))
    proposals = rules.proposals_from_json(reply)
    decisions = [rules.admit(p, turns, policy) for p in proposals]
    return [d.to_json() for d in _in_conversation_order(decisions, candidates)]


def _in_conversation_order(decisions: list[Any], candidates: list[Any]) -> list[Any]:
    """``decisions`` ordered by where their quote is in the conversation (the first
    candidate it is part of; a quote found in none goes first), the model's order kept
    among equals, so "the last admitted per field" is the user's latest statement."""

    def position(decision: Any) -> int:
        for candidate in candidates:
            if decision.quote and decision.quote in candidate.text:
                return int(candidate.index)
        return -1

    return sorted(decisions, key=position)
