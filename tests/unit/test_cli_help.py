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
