"""What a new user reads first (issue 13 item 5): ``--help`` is plain text listing every
command, an invalid JSON argument says where it breaks, a broker URL typo is a one-line
config error naming the setting (not a Celery traceback)."""

from __future__ import annotations

import json
import re
from typing import Any

import click
import pytest
import typer
from typer.testing import CliRunner

from ditto_worker.cli.commands import app
from ditto_worker.cli.options import parse_scope_option
from ditto_worker.config import check_fleet_url, load_runtime_config
from ditto_worker.errors import ConfigError

RULE_ID = re.compile(r"\b(MEM|SPEC)-[A-Z]+(-\d+)?\b|SPEC\.md")


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


COMMANDS = _commands(typer.main.get_group(app))


def _plain(text: str) -> None:
    assert "`" not in text, text  # no reStructuredText
    assert RULE_ID.search(text) is None, text  # no internal rule ids


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    _plain(result.output)
    listed = result.output.split("Commands:")[1]
    top = [c[0] for c in COMMANDS if len(c) == 1]
    assert {"worker", "invoke", "demo", "status", "flower", "migrate", "eval"} <= set(top)
    for name in top:
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", listed, re.M), name
    # each command's line is whole (Click cuts a long one short with "..."), at 80 columns
    narrow = CliRunner().invoke(app, ["--help"], terminal_width=80).output.split("Commands:")[1]
    for name in top:
        line = re.search(rf"^\s+{re.escape(name)}\s+(.*)$", narrow, re.M)
        assert line and not line.group(1).endswith("..."), (name, line and line.group(1))


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_help_is_plain(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    _plain(result.output)
    assert "[retrieval]" not in result.output or "ditto-worker[retrieval]" in result.output


def test_invalid_json_input_says_where() -> None:
    result = CliRunner().invoke(app, ["invoke", "MEMORY.GET", '{"ids": ["a",]}'])
    assert result.exit_code == 1
    wire: dict[str, Any] = json.loads(result.stdout)
    assert wire["status"] == "failed" and wire["error"]["code"] == "INVALID_INPUT"
    assert "line 1 column 14 (character 13)" in wire["error"]["message"]
    result = CliRunner().invoke(app, ["invoke", "MEMORY.GET", '{\n  "ids": ["a"\n}'])
    assert "line 3 column 1" in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        ([], {"DITTO_BROKER_URL": "redis//127.0.0.1:6379/0"}, "DITTO_BROKER_URL"),
        ([], {"DITTO_RESULT_BACKEND": "redis:/127.0.0.1:6379/0"}, "DITTO_RESULT_BACKEND"),
        (["--broker", "redis//127.0.0.1:6379/0"], {}, "--broker"),
    ],
)
def test_a_broker_url_typo_is_one_config_error_line(
    args: list[str], env: dict[str, str], names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DITTO_BROKER_URL", "DITTO_RESULT_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, ["invoke", "MEMORY.GET", '{"ids": ["a"]}', *args], env=env)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "fleet." in lines[0] and names in lines[0] and "redis://127.0.0.1:6379/0" in lines[0]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis//127.0.0.1:6379/0", "not a URL"),
        ("localhost:6379", "not a URL"),
        ("redis:/127.0.0.1", "not a URL"),
        ("kafka://guest:pw@host//", "scheme 'kafka'"),  # amqp:// is a broker now (issue 14)
        ("http://host:6379/0", "scheme 'http'"),
        ("redis://:s3cret@host:63a79/0", "port"),
        ("redis://:s3cret@host:99999/0", "port"),
        ("redis://host:6379/zero", "database"),
    ],
)
def test_fleet_urls_are_checked_without_showing_them(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_runtime_config({"fleet": {"brokerUrl": url}}, {}, source="ditto.yaml")
    message = str(caught.value)
    assert "fleet.brokerUrl (from ditto.yaml)" in message and reason in message
    assert url not in message and "s3cret" not in message


@pytest.mark.parametrize(
    "url",
    ["", "redis://127.0.0.1:6379/0", "rediss://:pw@h:6380/2", "redis://h", "redis://h/",
     "memory://", "redis+socket:///tmp/redis.sock", "sentinel://h:26379"],
)  # fmt: skip
def test_good_broker_urls_pass(url: str) -> None:
    assert check_fleet_url(url, "brokerUrl") == url
    assert load_runtime_config(None, {"DITTO_BROKER_URL": url}).fleet.broker_url == url


def test_result_backend_schemes() -> None:
    assert check_fleet_url("cache+memory://", "resultBackend") == "cache+memory://"
    with pytest.raises(ConfigError, match="resultBackend"):
        check_fleet_url("memory://", "resultBackend")


# --- issue 23 item 5: the CLI as a trusted operator, help that tells the truth ----------


def test_help_says_where_the_demo_keeps_its_store() -> None:
    top = " ".join(CliRunner().invoke(app, ["--help"]).output.split())
    assert "demo on a fresh SQLite file in a temporary folder deleted when it exits" in top
    assert "invoke on the configured store (SQLite: ./.ditto/memory.sqlite" in top
    demo = " ".join(CliRunner().invoke(app, ["demo", "--help"]).output.split())
    assert "temporary folder deleted when the demo exits" in demo
    for command in ("invoke", "demo"):
        text = " ".join(CliRunner().invoke(app, [command, "--help"]).output.split())
        assert "--scope tenant=ID,user=ID" in text, command


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("tenant=acme,user=alice", ("acme", "alice")),
        ("user=alice,tenant=acme", ("acme", "alice")),
        ("tenant=a=b,user= spaced ", ("a=b", " spaced ")),
        ("space=task:t-1,tenant=acme,user=alice", ("acme", "alice", "task:t-1")),
        ("tenant=acme,user=alice,space=memory", ("acme", "alice")),
    ],
)
def test_scope_option_parses(value: str, expected: tuple[str, ...]) -> None:
    scope = parse_scope_option(value)
    space = expected[2] if len(expected) == 3 else "memory"
    assert (scope.tenant, scope.user, scope.space) == (*expected[:2], space)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("tenant=acme", "user missing"),
        ("user=alice", "tenant missing"),
        ("", "'' is not key=value"),
        ("tenant=acme,user=alice,team=x", "unknown key 'team'"),
        ("Tenant=acme,user=alice", "unknown key 'Tenant'"),
        ("tenant=acme,user=", "user is empty"),
        ("tenant=,user=alice", "tenant is empty"),
        ("tenant=a,tenant=b,user=c", "tenant is given twice"),
        ("tenant=acme;user=alice", "user missing"),
        ("tenant=acme,user=alice,", "'' is not key=value"),
        ("tenant=" + "t" * 257 + ",user=u", "scope.tenant must be a string of 1-256"),
        ("tenant=a\tb,user=u", "scope.tenant contains a control character"),
        ("tenant=a,user=u,space=notes", "scope.space must be 'memory' or 'task:<taskId>'"),
        ("tenant=a,user=u,space=", "space is empty"),
        ("space=task:1", "tenant and user missing"),
    ],
)
@pytest.mark.parametrize("command", ["invoke", "demo"])
def test_a_bad_scope_is_one_line_naming_the_option(
    value: str, says: str, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DITTO_BROKER_URL", raising=False)
    args = ["invoke", "MEMORY.GET", '{"ids": ["a"]}'] if command == "invoke" else ["demo"]
    result = CliRunner().invoke(app, [*args, "--scope", value])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{command}: --scope: ") and says in lines[0], lines[0]


DOUBLED = re.compile(r"^([\w -]+): \1:|(\b[\w-]+): \2:", re.M)


@pytest.mark.parametrize(
    "args",
    [
        ["worker"],
        ["status"],
        ["flower"],
        ["migrate", "--store", "nope"],
        ["invoke", "MEMORY.GET", "{}", "--store", "nope"],
        ["demo", "--store", "nope"],
        ["worker", "--broker", "redis://127.0.0.1:1/0", "-Q", "memory.get"],
        ["worker", "--broker", "redis://127.0.0.1:1/0", "--nodes", "bogus"],
        ["invoke", "MEMORY.GET", "{}", "--broker", "redis//127.0.0.1:1/0"],
    ],
    ids=" ".join,
)
def test_errors_are_one_line_with_one_prefix(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DITTO_BROKER_URL", "DITTO_RESULT_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert DOUBLED.search(lines[0]) is None, lines[0]
    assert lines[0].startswith(("config error: ", f"{args[0]}: ")), lines[0]


def test_an_amqp_broker_option_keeps_the_configured_result_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --broker amqp://… was also taken as the result backend, which amqp cannot be: every
    # such call was a config error, whatever DITTO_RESULT_BACKEND said
    monkeypatch.delenv("DITTO_BROKER_URL", raising=False)
    monkeypatch.delenv("DITTO_RESULT_BACKEND", raising=False)
    args = ["status", "--broker", "amqp://guest:guest@127.0.0.1:1//"]
    alone = CliRunner().invoke(app, args)
    assert alone.exit_code == 2 and len(alone.stderr.splitlines()) == 1, alone.stderr
    assert "DITTO_RESULT_BACKEND is required with an amqp:// broker" in alone.stderr
    monkeypatch.setenv("DITTO_RESULT_BACKEND", "redis://127.0.0.1:1/0")
    paired = CliRunner().invoke(app, args)
    assert paired.exit_code == 1, paired.stderr  # configured; the broker is just not there
    assert paired.stderr.startswith("status: the broker (127.0.0.1:1) is unreachable")
