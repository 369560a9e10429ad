"""``write``, ``update`` and ``search`` on SQLite with a scripted model (SPEC.md MEM-TASK-1..5).

The model is assumed wrong: tests feed it invented quotes, values outside the policy,
one-off requests and secrets, and check that code refuses them with nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ditto_worker import Scope
from ditto_worker.memory_tasks import artifact_schema, run_search, run_update, run_write
from tests.unit._task_kit import ScriptedModel, options, task_runtime

ALICE = Scope("acme", "alice")
GERMAN = "Please always write to me in German."
FRENCH = "From now on, always write to me in French."
MESSAGES = {
    "de": "Das Projekt Atlas kommt gut voran: das Design ist fertig und der Bau zu sechzig "
    "Prozent erledigt.",
    "fr": "Le projet Atlas avance bien : la conception est terminée et la construction est "
    "faite à soixante pour cent.",
    "en": "Project Atlas is going well: design is done and the build is sixty percent done.",
}


def request(kind: str, task_id: str, said: str | None = None) -> dict[str, Any]:
    turns = [] if said is None else [
        {"role": "assistant", "content": "How should I write to you?"},
        {"role": "user", "content": said},
    ]  # fmt: skip
    return {"taskId": task_id, "kind": kind, "conversation": turns}


def model(proposal: Any, language: str | None = "de") -> ScriptedModel:
    """Proposes ``proposal`` when asked for proposals, else writes the progress message in
    ``language`` (``None``: the language the prompt asks for)."""

    def reply(body: Any) -> Any:
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
        if "proposals" in schema.get("properties", {}):
            return proposal
        if language is None:
            asked = body["messages"][0]["content"]
            code = "de" if "German" in asked else "fr" if "French" in asked else "en"
            return {"message": MESSAGES[code]}
        return {"message": MESSAGES[language]}

    return ScriptedModel(reply)


def proposing(quote: str, value: str, field: str = "language", index: int = 0) -> dict[str, Any]:
    return {"proposals": [{"candidate_index": index, "quote": quote, "field": field,
                           "value": value}]}  # fmt: skip


def preferences(runtime: Any) -> list[Any]:
    return runtime.invoke(
        "MEMORY.QUERY", {"filter": {"kind": "preference"}}, scope=ALICE
    ).output.items


def test_write_then_a_new_search_task_applies_and_cites_the_preference(tmp_path: Path) -> None:
    # the done-when, with a scripted model: write, then a new task recalls and uses it
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        wrote = run_write(runtime, {"request": request("write", "w1", GERMAN)},
                          options(tmp_path, allow_write=True))  # fmt: skip
        assert wrote.status == "success", wrote.error
        [saved] = preferences(runtime)
        assert saved.key == "preference:language"
        assert saved.metadata["version"] == 1 and saved.metadata["value"] == "de"
        assert wrote.artifact is not None
        assert wrote.artifact["admission"]["decision"] == "admitted"
        assert wrote.artifact["mutation"]["records"][0]["id"] == saved.id
        found = run_search(runtime, {"request": request("search", "s1")}, options(tmp_path))
    assert found.status == "success", found.error
    artifact = json.loads(Path(found.artifact_path or "").read_text())
    jsonschema.validate(artifact, artifact_schema())
    assert artifact["applied"]["language"] == "de"
    assert artifact["memories"] == [{"id": saved.id, "key": "preference:language",
                                     "version": 1, "field": "language", "value": "de"}]  # fmt: skip
    assert artifact["message"].endswith(f"(memory {saved.id} v1)")
    assert artifact["languageCheck"]["passed"] is True
    assert artifact["context"]["restored"] is True  # a first load misses: restored from the DB


def test_update_revises_the_same_id_once_and_a_replay_bumps_nothing(tmp_path: Path) -> None:
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        run_write(runtime, {"request": request("write", "w1", GERMAN)},
                  options(tmp_path, allow_write=True))  # fmt: skip
        [before] = preferences(runtime)
    with model(proposing(FRENCH, "fr"), "fr") as fake, task_runtime(tmp_path, fake) as (runtime, _):
        revised = run_update(runtime, {"request": request("update", "u1", FRENCH)},
                             options(tmp_path, allow_write=True))  # fmt: skip
        assert revised.status == "success", revised.error
        [after] = preferences(runtime)
        assert (after.id, after.metadata["version"], after.metadata["value"]) == (
            before.id, 2, "fr",
        )  # fmt: skip
        assert revised.artifact is not None
        assert revised.artifact["mutation"]["records"][0]["previousVersion"] == 1
        # the artifact was lost after the report committed: publishing again infers nothing
        calls = fake.calls
        Path(revised.artifact_path or "").unlink()
        again = run_update(runtime, {"request": request("update", "u1", FRENCH)},
                           options(tmp_path, allow_write=True))  # fmt: skip
        assert again.status == "success" and fake.calls == calls
        [still] = preferences(runtime)
        assert still.metadata["version"] == 2


class Crash(Exception):
    """The controller died here (the plan is never resumed)."""


class CrashAfter:
    """A runtime whose loop dies right after the Graph ``name`` succeeded: the effect
    committed, the plan never saw it (so its checkpoint was never written)."""

    def __init__(self, runtime: Any, name: str) -> None:
        self.runtime, self.name = runtime, name

    def loop(self, plan: Any, input: Any, **options: Any) -> Any:
        def dying(value: Any) -> Any:
            inner = plan(value)
            try:
                step = next(inner)
                while True:
                    result = yield step
                    if step[0].name == self.name and result.status == "success":
                        raise Crash()
                    step = inner.send(result)
            except StopIteration as stop:
                return stop.value

        return self.runtime.loop(dying, input, **options)


@pytest.mark.parametrize("kind", ["write", "update"])
def test_a_crash_after_the_mutation_replays_nothing(tmp_path: Path, kind: str) -> None:
    # MEM-TASK-4: the mutation committed, its checkpoint did not (the controller died):
    # the resumed task reads content and operation id back and applies nothing again
    said, value = (GERMAN, "de") if kind == "write" else (FRENCH, "fr")
    if kind == "update":
        with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (rt, _):
            run_write(rt, {"request": request("write", "w0", GERMAN)},
                      options(tmp_path, allow_write=True))  # fmt: skip
    with model(proposing(said, value), value) as fake, task_runtime(tmp_path, fake) as (rt, _):
        task = run_write if kind == "write" else run_update
        inputs = {"request": request(kind, "t1", said)}
        with pytest.raises(Crash):
            task(CrashAfter(rt, "mutate"), inputs, options(tmp_path, allow_write=True))
        [applied] = preferences(rt)
        assert applied.metadata["value"] == value
        again = task(rt, inputs, options(tmp_path, allow_write=True))
        assert again.status == "success", again.error
        assert again.artifact is not None and again.artifact["mutation"]["replayed"] is True
        [saved] = preferences(rt)
        assert saved.metadata["version"] == applied.metadata["version"]
        assert saved.metadata["version"] == (1 if kind == "write" else 2)


def test_without_the_hosts_permission_no_model_is_asked_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        outcome = run_write(runtime, {"request": request("write", "w1", GERMAN)},
                            options(tmp_path))  # fmt: skip
        assert outcome.status == "success"
        assert outcome.artifact is not None
        assert outcome.artifact["admission"]["decision"] == "denied"
        assert fake.calls == 0 and preferences(runtime) == []


@pytest.mark.parametrize(
    ("said", "proposal", "reason"),
    [
        (
            "Just this once, reply in French please.",
            proposing("Just this once, reply in French please.", "fr"),
            "not_durable_one_off",
        ),
        (
            "If I were in Paris, would you write to me in French?",
            proposing("If I were in Paris, would you write to me in French?", "fr"),
            "not_durable",
        ),
        (
            "Always write to me in German, my card is 4111 1111 1111 1111.",
            proposing("Always write to me in German, my card is 4111 1111 1111 1111.", "de"),
            "secret",
        ),
        (GERMAN, proposing(GERMAN, "fr"), "value_not_grounded"),
    ],
)
def test_a_proposal_code_refuses_writes_nothing(
    tmp_path: Path, said: str, proposal: Any, reason: str
) -> None:
    with model(proposal) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        outcome = run_write(runtime, {"request": request("write", "w1", said)},
                            options(tmp_path, allow_write=True))  # fmt: skip
        assert outcome.status == "success", outcome.error
        assert outcome.artifact is not None
        admission = outcome.artifact["admission"]
        assert admission["decision"] == "rejected"
        assert any(reason in code for p in admission["proposals"] for code in p["reasons"])
        assert outcome.artifact["mutation"] is None and preferences(runtime) == []
        if reason == "secret":
            assert "4111" not in json.dumps(outcome.artifact)


@pytest.mark.parametrize(
    "proposal",
    [
        proposing("I always want German.", "de"),  # a quote not in the conversation
        proposing("How should I write to you?", "de"),  # the assistant's words
        proposing(GERMAN, "klingon"),  # a value outside the policy
        proposing(GERMAN, "de", field="password"),  # a field outside the policy
    ],
)
def test_a_proposal_outside_the_schema_fails_the_task_with_nothing_written(
    tmp_path: Path, proposal: Any
) -> None:
    with model(proposal) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        outcome = run_write(runtime, {"request": request("write", "w1", GERMAN)},
                            options(tmp_path, allow_write=True))  # fmt: skip
        assert outcome.status == "failed"
        assert outcome.error is not None and outcome.error["code"] == "INFER_INVALID_OUTPUT"
        assert preferences(runtime) == []
    assert not (tmp_path / "artifacts").exists()


def test_a_message_not_in_the_remembered_language_fails_after_its_attempts(
    tmp_path: Path,
) -> None:
    with model(proposing(GERMAN, "de")) as fake, task_runtime(tmp_path, fake) as (runtime, _):
        run_write(runtime, {"request": request("write", "w1", GERMAN)},
                  options(tmp_path, allow_write=True))  # fmt: skip
    with model({}, "en") as fake, task_runtime(tmp_path, fake) as (runtime, _):
        found = run_search(runtime, {"request": request("search", "s1")}, options(tmp_path))
        assert found.status == "failed"
        assert found.error is not None and found.error["code"] == "INFER_INVALID_OUTPUT"
        assert fake.calls == 3


@pytest.mark.parametrize("later_first", [False, True])
def test_a_later_statement_revises_an_earlier_one_whatever_the_models_order(
    later_first: bool,
) -> None:
    # per field the last admitted statement in the conversation is stored, whatever the
    # order of the model's proposals (the schema offers a revised field from its latest
    # sentence only; this holds where it offers every user sentence)
    from ditto_worker.memory_tasks.policy import (
        DEFAULT_POLICY,
        Proposal,
        admit,
        candidate_sentences,
        turns_from_messages,
    )
    from ditto_worker.memory_tasks.preferences import _in_conversation_order
    from ditto_worker.memory_tasks.revise import _admitted

    first, later = "Please always reply in German.", "Actually, from now on reply in English."
    turns = turns_from_messages([{"role": "user", "content": first},
                                 {"role": "assistant", "content": "OK."},
                                 {"role": "user", "content": later}])  # fmt: skip
    listed = [Proposal("language", "de", first, 0), Proposal("language", "en", later, 1)]
    decisions = [admit(p, turns, DEFAULT_POLICY) for p in (listed[::-1] if later_first else listed)]
    ordered = _in_conversation_order(decisions, candidate_sentences(turns))
    [stored] = _admitted([d.to_json() for d in ordered])
    assert (stored["value"], stored["quote"]) == ("en", later)


def test_the_model_is_shown_the_pairs_code_would_admit_beside_each_sentence(
    tmp_path: Path,
) -> None:
    # code-side candidate selection (bench/admission.py): the prompt lists the sentences
    # admit() would take a pair from, with the pairs, and the schema's quotes are those
    # sentences; a one-off, a secret or an aside is neither listed nor quotable (when no
    # sentence is listed every user sentence is: test_a_proposal_code_refuses_writes_nothing)
    durable = "Keep your status updates short from now on."
    conversation = [
        {"role": "user", "content": f"Hi! {durable}"},
        {"role": "user", "content": "Just this once, reply in French."},
        {"role": "user", "content": "Reply in German from now on, my password is hunter22x."},
    ]
    with model(proposing(durable, "short", field="length", index=1), "en") as fake:
        with task_runtime(tmp_path, fake) as (runtime, _):
            wrote = run_write(
                runtime, {"request": {"taskId": "w1", "kind": "write",
                                      "conversation": conversation}},
                options(tmp_path, allow_write=True),
            )  # fmt: skip
            [saved] = preferences(runtime)
    listing = fake.bodies[0]["messages"][1]["content"].splitlines()
    assert listing == [f"1. {durable} -> length=short"]
    schema = fake.bodies[0]["response_format"]["json_schema"]["schema"]
    for branch in schema["properties"]["proposals"]["items"]["anyOf"]:
        assert branch["properties"]["quote"]["enum"] == [durable]
        assert branch["properties"]["candidate_index"]["enum"] == [1]
    assert (saved.metadata["field"], saved.metadata["value"]) == ("length", "short")
    assert wrote.artifact is not None and wrote.artifact["admission"]["decision"] == "admitted"


def test_a_revised_field_is_offered_from_its_latest_sentence_only() -> None:
    # a later statement revises an earlier one: the earlier sentence's pair of the same
    # field is not offered (the offline model, offered both, proposed the first)
    from ditto_worker.memory_tasks.policy import (
        DEFAULT_POLICY,
        candidate_sentences,
        turns_from_messages,
    )
    from ditto_worker.memory_tasks.preferences import admissible_options

    turns = turns_from_messages([
        {"role": "user", "content": "Please always reply in German. Keep it short."},
        {"role": "assistant", "content": "OK."},
        {"role": "user", "content": "Actually, from now on reply in English."},
    ])  # fmt: skip
    candidates = candidate_sentences(turns)
    assert admissible_options(candidates, turns, DEFAULT_POLICY) == {
        0: [], 1: ["length=short"], 2: ["language=en"],
    }  # fmt: skip
