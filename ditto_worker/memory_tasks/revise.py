"""The ``write`` and ``update`` tasks: the model proposes, code decides, then one mutation
applied at most once (SPEC.md MEM-TASK-3/4, MEM-RUN-7, MEM-UPDATE-5).

The seed's table (memory-capabilities): "write.ts — Check permission, infer a proposal,
validate exact evidence and policy, MEMORY.WRITE — A new task retrieves and uses the
saved preference"; "update.ts — Read existing preference, validate the revision,
MEMORY.UPDATE the same ID — Apply revised preferences; regenerate the vector alongside
content". Stages:

1. **permission** — the host's (``TaskOptions.allow_write``); without it no model is
   called and nothing is written (admission ``denied``);
2. ``propose`` — :func:`~ditto_worker.memory_tasks.preferences.propose`: every proposal
   decided by code; only admitted ones go on (one per field: the last in conversation
   order, a later statement revises an earlier one);
3. ``candidate`` — the change (records, versions, operation id ``<taskId>:<kind>``) is
   committed in the task space *before* the mutation;
4. ``mutate`` — the preference records are read back first (MEMORY.GET): a record that
   already carries this operation id (and, for update, the new version) was written by an
   earlier attempt, so nothing is applied again and no version is bumped twice; else
   MEMORY.WRITE / MEMORY.UPDATE with the operation id (and ``ifMetadata: {version}`` on
   update, so a concurrent controller's revision is a ``CONFLICT``, not a lost update). A
   store that answers ``UNSUPPORTED`` to those guards is asked once more without them; the
   read-back still prevents double application by one controller;
5. ``message`` — the progress message applying the saved preferences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ditto_worker.memory_tasks.contracts import TaskInputs, TaskKind, TaskOptions, TaskOutcome
from ditto_worker.memory_tasks.preferences import cited, preference_key, propose
from ditto_worker.memory_tasks.runner import (
    TaskPlan,
    base_artifact,
    run_task,
    stop_if_asked,
    task_loop,
)
from ditto_worker.memory_tasks.search import message_stage
from ditto_worker.memory_tasks.steps import (
    CANDIDATE_KEY,
    Plan,
    TaskRun,
    complete,
    mutate,
    require,
    save,
)
from ditto_worker.runtime.graphs import graph

__all__ = [
    "REVISE_STAGES",
    "run_update",
    "run_update_loop",
    "run_write",
    "run_write_loop",
]

REVISE_STAGES = ["propose", "mutate", "message"]
"""The checkpointed stages of ``write`` and ``update``."""

_DENIED = "the host did not grant storage permission; no model was asked, nothing written"


def _decide(run: TaskRun) -> Plan:
    decisions = run.done("propose")
    if isinstance(decisions, list):
        return decisions
    decisions = yield from propose(run, run.policy)
    yield from complete(run, "propose", decisions)
    stop_if_asked(run)
    return decisions


def _admitted(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One admitted decision per field: the last in conversation order (``propose``
    orders the decisions so), as a later statement revises an earlier one ("reply in
    German … actually, from now on in English")."""
    last: dict[str, dict[str, Any]] = {}
    for decision in decisions:
        if decision["admitted"]:
            last.pop(decision["field"], None)
            last[decision["field"]] = decision
    return list(last.values())


def _admission(decisions: list[dict[str, Any]], extra: list[str]) -> dict[str, Any]:
    reasons = [f"{d['field']}={d['value']}: {d['message']}" for d in decisions] + extra
    admitted = any(d["admitted"] for d in decisions) and not extra
    if not decisions:
        reasons.append("the model proposed no preference")
    return {"decision": "admitted" if admitted else "rejected", "reasons": reasons,
            "proposals": decisions}  # fmt: skip


def _record(run: TaskRun, decision: Mapping[str, Any], version: int, op: str) -> dict[str, Any]:
    field, value, quote = decision["field"], decision["value"], decision["quote"]
    return {
        "content": {"field": field, "value": value, "statement": quote},
        "metadata": {"kind": "preference", "field": field, "value": value, "version": version,
                     "quote": quote, "operationId": op, "taskId": run.request.task_id},
    }  # fmt: skip


def _read(keys: list[str] | None = None, ids: list[str] | None = None) -> Plan:
    body = {"keys": keys or [], "ids": ids or []}
    found = require((yield graph("read-back").node("get", "MEMORY.GET", [], lambda _: body), None),
                    "get")  # fmt: skip
    return found


def _meta(item: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = item.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _split(
    node: str,
    memories: list[dict[str, Any]],
    found: list[Any],
    op: str,
    previous: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], list[Any], list[Any], list[Any]]:
    """``(to apply, mine, stored, refused)``: the candidate's memories still to apply; the
    records this operation already wrote; those a write finds stored with the same value
    (nothing to do: "already stored"); those it may not change — a write's field stored
    with another value (``update`` revises it), an update's record revised since the
    task read it. Convergence (issue 35 item 3): none of these ends in a retry loop."""
    by_ref = {i["id"]: i for i in found} | {i.get("key"): i for i in found if i.get("key")}
    apply: list[dict[str, Any]] = []
    mine: list[Any] = []
    stored: list[Any] = []
    refused: list[Any] = []
    for memory in memories:
        item = by_ref.get(memory.get("id") or memory.get("key"))
        meta = {} if item is None else _meta(item)
        if item is None:
            apply.append(memory)
        elif meta.get("operationId") == op:
            mine.append(item)
        elif node == "MEMORY.WRITE":
            same = meta.get("value") == memory["metadata"]["value"]
            (stored if same else refused).append(item)
        elif meta.get("version") != previous.get(item["id"]):
            refused.append(item)
        else:
            apply.append(memory)
    return apply, mine, stored, refused


def _apply(run: TaskRun, candidate: Mapping[str, Any]) -> Plan:
    op, node = candidate["operationId"], candidate["node"]
    memories = candidate["memories"]
    if node == "MEMORY.WRITE":
        found = yield from _read(keys=[preference_key(m["metadata"]["field"]) for m in memories])
    else:
        found = yield from _read(ids=[m["id"] for m in memories])
    apply, mine, stored, refused = _split(node, memories, found, op, candidate["previous"])
    result: dict[str, Any] = {"records": [cited(i) for i in mine], "replayed": bool(mine),
                              "guarded": True, "stored": [cited(i) for i in stored],
                              "refused": [cited(i) for i in refused]}  # fmt: skip
    if apply:
        written, result["guarded"] = yield from mutate("mutate", node, {"memories": apply}, op)
        result["records"] += [cited(i) for i in written]
        result["replayed"] = False
    return result


def _candidate(run: TaskRun, kind: TaskKind, admitted: list[dict[str, Any]]) -> Plan:
    """The change to make (only what is not stored already), and the reasons for the
    fields left out (update of a missing field; a write's field already stored)."""
    op = f"{run.request.task_id}:{kind}"
    current = yield from _read(keys=[preference_key(d["field"]) for d in admitted])
    if kind == "write":
        memories = [{"key": preference_key(d["field"]), **_record(run, d, 1, op)}
                    for d in admitted]  # fmt: skip
        apply, _, stored, refused = _split("MEMORY.WRITE", memories, current, op, {})
        return {"node": "MEMORY.WRITE", "operationId": op, "memories": apply, "previous": {},
                "stored": [cited(i) for i in stored],
                "refused": [cited(i) for i in refused]}, []  # fmt: skip
    by_key = {item.get("key"): item for item in current}
    entries, previous, reasons = [], {}, []
    for decision in admitted:
        item = by_key.get(preference_key(decision["field"]))
        if item is None:
            reasons.append(f"{decision['field']}: no preference to update (write stores new ones)")
            continue
        version = int(item["metadata"]["version"])
        entry = {"id": item["id"], **_record(run, decision, version + 1, op)}
        entry["ifMetadata"] = {"version": version}
        entries.append(entry)
        previous[item["id"]] = version
    node = {"node": "MEMORY.UPDATE", "operationId": op, "memories": entries, "previous": previous}
    return node, reasons


STORED_REASON = "{field}={value}: already stored (memory {id} v{version}); nothing written"
REFUSED_WRITE = (
    "{field}: stored as {value} (memory {id} v{version}); write does not change a stored "
    "preference: run the update task to revise it"
)
REFUSED_UPDATE = (
    "{field}: memory {id} is at v{version}, revised since this task read it; nothing "
    "written: run the update task again to revise the current version"
)
"""The reasons an artifact gives for fields a task left as they were (issue 35 item 3)."""


def _settled(kind: TaskKind, artifact: dict[str, Any], done: Mapping[str, Any]) -> None:
    """Fills ``admission`` for stored / refused fields and says what to do."""
    stored, refused = done.get("stored") or [], done.get("refused") or []
    admission = artifact["admission"]
    admission["reasons"] += [STORED_REASON.format(**m) for m in stored]
    admission["reasons"] += [(REFUSED_WRITE if kind == "write" else REFUSED_UPDATE).format(**m)
                             for m in refused]  # fmt: skip
    if refused and not done.get("records"):
        admission["decision"] = "rejected"
    elif stored and not done.get("records"):
        admission["decision"] = "already_stored"


def _denied(run: TaskRun, artifact: dict[str, Any]) -> dict[str, Any]:
    artifact["admission"] = {"decision": "denied", "reasons": [_DENIED], "proposals": []}
    run.say("permission: denied by the host")
    return artifact


def _body(kind: TaskKind) -> Any:
    def body(run: TaskRun) -> Plan:
        artifact = base_artifact(run)
        if not run.options.allow_write:
            return _denied(run, artifact)
        decisions = yield from _decide(run)
        admitted = _admitted(decisions)
        candidate = run.checkpoints.get(CANDIDATE_KEY)
        reasons: list[str] = []
        if admitted and candidate is None:
            candidate, reasons = yield from _candidate(run, kind, admitted)
            if candidate["memories"]:
                yield from save(run, CANDIDATE_KEY, candidate, kind="candidate")
        artifact["admission"] = _admission(decisions, reasons if not admitted else [])
        if candidate is None or not candidate["memories"]:
            if reasons:
                artifact["admission"]["decision"] = "rejected"
                artifact["admission"]["reasons"] += reasons
            if candidate is not None:
                _settled(kind, artifact, candidate)
                yield from _apply_nothing(run, artifact, candidate.get("stored") or [])
            return artifact
        mutation = run.done("mutate")
        if not isinstance(mutation, Mapping):
            mutation = yield from _apply(run, candidate)
            yield from complete(run, "mutate", mutation)
        _settled(kind, artifact, {**candidate, **mutation})
        if not mutation["records"]:
            yield from _apply_nothing(run, artifact, mutation.get("stored") or [])
            return artifact
        records = [{**r, "previousVersion": candidate["previous"].get(r["id"])}
                   for r in mutation["records"]]  # fmt: skip
        artifact["mutation"] = {"node": candidate["node"], "operationId": candidate["operationId"],
                                "records": records, "replayed": mutation["replayed"],
                                "guarded": mutation["guarded"]}  # fmt: skip
        used = [*mutation["records"], *(mutation.get("stored") or [])]
        artifact.update((yield from message_stage(run, used)))
        artifact["memories"] = used
        return artifact

    return body


def _apply_nothing(run: TaskRun, artifact: dict[str, Any], stored: list[Any]) -> Plan:
    """A task that wrote nothing: with preferences already stored, the message applies and
    cites them as a write would have; with none, no message (as before)."""
    if stored:
        artifact.update((yield from message_stage(run, list(stored))))
        artifact["memories"] = list(stored)
    return artifact


def run_write(
    runtime: Any,
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskOutcome:
    """Run the ``write`` task (see the module docstring).

    Args:
        runtime: a runtime serving MEMORY, INFER.GENERATE (and CONTEXT).
        inputs: ``{request, model}``; ``request.kind`` must be ``write``;
            ``request.conversation`` holds the messages to learn from.
        options: the controller's tenant, user and ``allow_write`` permission.
        policy: the admission policy: a ``PreferencePolicy``, a ``tasks.policy`` mapping
            (:mod:`~ditto_worker.memory_tasks.policy_config`; an invalid one fails
            ``INVALID_INPUT`` before any call) or ``None`` (the default, as strict as
            before).

    Returns:
        The :class:`TaskOutcome`; its artifact's ``admission`` gives the decision on
        every proposal with its reasons, ``mutation`` what was written.
    """
    return run_task(runtime, "write", inputs, options, _body("write"), lambda _: REVISE_STAGES,
                    policy)  # fmt: skip


def run_update(
    runtime: Any,
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskOutcome:
    """Run the ``update`` task: like :func:`run_write`, revising the existing preference
    of each admitted field in place (same id, version + 1, ``ifMetadata`` on the version
    it read); a field with no stored preference is rejected with that reason. ``policy``
    as for :func:`run_write`."""
    return run_task(runtime, "update", inputs, options, _body("update"), lambda _: REVISE_STAGES,
                    policy)  # fmt: skip


def run_write_loop(
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskPlan:
    """The ``write`` task as a plan for the host's own ``runtime.loop()`` — the seed's
    ``runWriteLoop`` (memory-capabilities, "Graph / Loop composition"); :func:`run_write`
    runs exactly this plan in a loop of its own. The candidate commits before the
    mutation, the mutation's read-back before it: one Graph after the other.
    ``inputs``, ``options``, ``policy`` and the result as for
    :func:`~ditto_worker.memory_tasks.search.run_search_loop`."""
    return task_loop("write", inputs, options, _body("write"), lambda _: REVISE_STAGES, policy)


def run_update_loop(
    inputs: TaskInputs | Mapping[str, Any],
    options: TaskOptions,
    *,
    policy: Any = None,
) -> TaskPlan:
    """The ``update`` task as a plan for the host's own ``runtime.loop()`` — the seed's
    ``runUpdateLoop``; :func:`run_update` runs exactly this plan in a loop of its own.
    As :func:`run_write_loop` otherwise."""
    return task_loop("update", inputs, options, _body("update"), lambda _: REVISE_STAGES, policy)
