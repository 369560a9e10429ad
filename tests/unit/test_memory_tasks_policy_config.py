"""The admission policy as configuration (issue 35 item 4): ``ditto.yaml`` ``tasks.policy``
and ``policy=`` on every ``run_*``; validated before anything runs; the default as strict
as before. The model is the scripted fake endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ditto_worker.cli.commands import app
from ditto_worker.memory_tasks import (
    load_task_policy,
    policy_from_config,
    run_search,
    run_task_state,
    run_update,
    run_write,
)
from ditto_worker.memory_tasks.policy import DEFAULT_POLICY, PolicyError, Proposal, Turn, admit
from tests.unit._task_kit import options, task_runtime
from tests.unit.test_memory_tasks_preferences import model, preferences, proposing, request

SIGN = "From now on, always sign your updates with my initials."
WIDER = {"fields": {"signoff": {"initials": ["initials", "Initialen"]}}}


def test_the_default_stays_as_strict_as_before() -> None:
    assert policy_from_config(None) is DEFAULT_POLICY
    assert policy_from_config({}) is DEFAULT_POLICY
    same = policy_from_config({"extend": True})
    assert dict(same.fields) == dict(DEFAULT_POLICY.fields)
    assert not admit(Proposal("signoff", "initials", SIGN), [Turn("user", SIGN)]).admitted


def test_a_widened_policy_admits_and_stores_the_new_field(tmp_path: Path) -> None:
    with model(proposing(SIGN, "initials", field="signoff"), language="en") as fake, \
            task_runtime(tmp_path, fake) as (rt, _):  # fmt: skip
        refused = run_write(rt, {"request": request("write", "w0", SIGN)},
                            options(tmp_path, allow_write=True))  # fmt: skip
        assert refused.status == "failed"  # the default schema has no such field
        assert preferences(rt) == []
        wrote = run_write(rt, {"request": request("write", "w1", SIGN)},
                          options(tmp_path, allow_write=True), policy=WIDER)  # fmt: skip
        assert wrote.status == "success", wrote.error
        assert wrote.artifact is not None
        assert wrote.artifact["admission"]["decision"] == "admitted"
        [pref] = preferences(rt)
        assert (pref.metadata["field"], pref.metadata["value"]) == ("signoff", "initials")
        found = run_search(rt, {"request": request("search", "s1")}, options(tmp_path),
                           policy=policy_from_config(WIDER))  # fmt: skip
        assert found.status == "success", found.error
        assert found.artifact is not None
        assert [m["field"] for m in found.artifact["memories"]] == ["signoff"]


@pytest.mark.parametrize(
    ("policy", "names"),
    [
        ({"fields": {"x": {}}}, "tasks.policy.fields.x"),
        ({"fields": {"x": {"y": []}}}, "tasks.policy.fields.x.y"),
        ({"fields": {"x": {"y": "word"}}}, "tasks.policy.fields.x.y"),
        ({"feilds": {}}, "unknown key 'feilds'"),
        ({"extend": "yes"}, "tasks.policy.extend"),
        ({"notDurable": []}, "tasks.policy.notDurable"),
        ({"secrets": {"ticket": "TKT-[0-9"}}, "tasks.policy.secrets.ticket"),
    ],
)
def test_an_invalid_policy_is_refused_before_any_model_call(
    tmp_path: Path, policy: dict[str, Any], names: str
) -> None:
    with pytest.raises(PolicyError, match=names.replace(".", r"\.")):
        policy_from_config(policy)
    with model(proposing(SIGN, "de")) as fake, task_runtime(tmp_path, fake) as (rt, _):
        for entry, kind in ((run_write, "write"), (run_update, "update"),
                            (run_search, "search"), (run_task_state, "task-state")):  # fmt: skip
            outcome = entry(rt, {"request": request(kind, "t1", SIGN)},
                            options(tmp_path, allow_write=True), policy=policy)  # fmt: skip
            assert outcome.status == "failed"
            assert outcome.error is not None and outcome.error["code"] == "INVALID_INPUT"
            assert "policy" in outcome.error["message"]
        assert fake.calls == 0
    assert not (tmp_path / "artifacts").exists()


def test_added_not_durable_phrases_and_secret_shapes_are_applied() -> None:
    policy = policy_from_config(
        {"notDurable": ["this sprint"], "secrets": {"ticket": "TKT-[0-9]{8}"}}
    )
    sprint = "For this sprint, always reply in German."
    ticket = "Always reply in German, ticket TKT-12345678."
    assert admit(Proposal("language", "de", sprint), [Turn("user", sprint)]).admitted
    assert admit(Proposal("language", "de", sprint), [Turn("user", sprint)], policy).reasons == (
        "not_durable_policy",
    )
    assert admit(Proposal("language", "de", ticket), [Turn("user", ticket)], policy).reasons == (
        "secret",
    )


def test_ditto_yaml_tasks_policy_is_loaded_and_an_invalid_one_stops_the_cli_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ditto.yaml").write_text(
        "tasks:\n  policy:\n    fields:\n      signoff:\n        initials: [initials]\n"
    )
    assert "signoff" in load_task_policy().fields
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  policy:\n    fields:\n      signoff: {}\n")
    result = CliRunner().invoke(app, ["example", "write", "--config", str(bad)])
    assert result.exit_code == 2
    assert "tasks.policy.fields.signoff" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / ".examples-memory-tasks").exists()  # nothing was made
