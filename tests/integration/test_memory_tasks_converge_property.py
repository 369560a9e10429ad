"""Every task directory converges, whatever runs in it (issue 35 item 3), on SQLite.

Each hypothesis example makes one task directory with ``ditto-worker example write``, then
runs a sequence of ``write`` (the same value and another), ``update``, ``task-state`` and
``search`` in it, each a real ``python -m ditto_worker`` subprocess that is SIGKILLed
after a chosen number of its output lines (or let finish). Every answer must be
documented: success, the refusal naming ``update`` (exit 1), or the refusal of another
kind while a task is unfinished naming the command that finishes it (exit 2). At the end
the unfinished task (if any) is finished by running its own kind again — at most twice,
never a loop — and a ``search`` in the directory succeeds, with at most one preference
per field. The model is the scripted fake endpoint, reached over loopback HTTP.

Three explicit examples (:data:`EVERY_FAULT`) run first, so that every run covers every
fault kind whatever hypothesis draws: each of the six commands SIGKILLed at least once,
after 1, 2, 3, 4, 5 and 6 lines, and write, update, task-state and search let finish
between kills. ``DITTO_CONVERGE_EXAMPLES`` sets the number of drawn examples after them:
the issue asks about 30 (``DITTO_CONVERGE_EXAMPLES=30``, 20+ minutes at load 15-25 on the
shared 2-core machine: each command is a fresh Python process, ~1.6 CPU s); the default,
6 (with the three explicit ones, 9 examples; it was 12 drawn ones, without the guarantee),
keeps the suite's time in bounds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit._task_kit import ScriptedModel
from tests.unit.test_memory_tasks_converge import reply
from tests.unit.test_memory_tasks_preferences import FRENCH, GERMAN

EXAMPLES = int(os.environ.get("DITTO_CONVERGE_EXAMPLES", "6"))
COMMANDS = {
    "write-de": ["write", "de"],
    "write-fr": ["write", "fr"],
    "update-fr": ["update", "fr"],
    "update-de": ["update", "de"],
    "task-state": ["task-state", None],
    "search": ["search", None],
}
# (command, SIGKILL after this many output lines or None: let it finish), per example
EVERY_FAULT = [
    [("write-fr", 1), ("update-de", 2), ("update-fr", None), ("search", None)],
    [("update-fr", 4), ("task-state", 1), ("write-de", None)],
    [("search", 3), ("write-de", 6), ("task-state", None), ("update-de", 5)],
]
STEP = st.tuples(st.sampled_from(sorted(COMMANDS)), st.one_of(st.none(), st.integers(1, 6)))


def _run(args: list[str], cwd: Path, env: dict[str, str], kill_after: int | None) -> tuple[
    int, str
]:  # fmt: skip
    """Runs ``python -m ditto_worker example ...``; SIGKILL after ``kill_after`` lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "example", *args], cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if kill_after is not None and len(lines) >= kill_after:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.stdout.close()
    return proc.wait(timeout=300), "".join(lines)


def _documented(code: int, output: str) -> None:
    if code in (0, -signal.SIGKILL):
        return
    if code == 1:
        assert "change it with: ditto-worker example update --directory" in output, output
    else:
        assert code == 2 and re.search(r"unfinished \S+ task .*: finish it with", output), output


@pytest.fixture(scope="module")
def endpoint() -> Any:
    with ScriptedModel(reply) as model:
        yield model.server.base_url


@pytest.mark.timeout(max(1500, EXAMPLES * 120))
def test_any_sequence_with_kills_converges(endpoint: str, tmp_path_factory: Any) -> None:
    killed = {(name, kill) for steps in EVERY_FAULT for name, kill in steps if kill}
    finished = {COMMANDS[name][0] for steps in EVERY_FAULT for name, kill in steps if not kill}
    assert {name for name, _ in killed} == set(COMMANDS)  # every command killed
    assert {kill for _, kill in killed} == set(range(1, 7))  # at every line count drawn
    assert finished == {"write", "update", "task-state", "search"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("DITTO_BROKER")}
    env["DITTO_WORKER_INFER_BASE_URL"] = endpoint
    runs = [0]

    @settings(max_examples=EXAMPLES, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(steps=st.lists(STEP, min_size=1, max_size=4))
    @example(steps=EVERY_FAULT[0])
    @example(steps=EVERY_FAULT[1])
    @example(steps=EVERY_FAULT[2])
    def check(steps: list[tuple[str, int | None]]) -> None:
        cwd = tmp_path_factory.mktemp("converge")
        said = {"de": cwd / "de.json", "fr": cwd / "fr.json"}
        said["de"].write_text(json.dumps([{"role": "user", "content": GERMAN}]))
        said["fr"].write_text(json.dumps([{"role": "user", "content": FRENCH}]))
        code, output = _run(["write"], cwd, env, None)
        assert code == 0, output
        folder = re.search(r"^task directory: (\S+)$", output, re.M)
        assert folder is not None
        where = ["--directory", folder.group(1)]

        def args_of(name: str) -> list[str]:
            kind, language = COMMANDS[name]
            assert kind is not None
            extra = [] if language is None else ["--conversation", str(said[language])]
            return [kind, *where, *extra]

        for name, kill_after in steps:
            runs[0] += 1
            _documented(*_run(args_of(name), cwd, env, kill_after))
        request = json.loads((cwd / folder.group(1) / "request.json").read_text())
        artifact = cwd / folder.group(1) / "artifacts" / f"{request['taskId']}.json"
        for _ in range(2):  # finish the unfinished task: its own kind, with no kill
            if artifact.is_file():
                break
            language = "fr" if "French" in json.dumps(request["conversation"]) else "de"
            kind = request["kind"]
            extra = ["--conversation", str(said[language])] if kind in ("write", "update") else []
            code, output = _run([kind, *where, *extra], cwd, env, None)
            assert code in (0, 1), output
            _documented(code, output)
        assert artifact.is_file(), "the directory did not converge"
        code, output = _run(["search", *where], cwd, env, None)
        assert code == 0, output
        request = json.loads((cwd / folder.group(1) / "request.json").read_text())
        found = json.loads(
            (cwd / folder.group(1) / "artifacts" / f"{request['taskId']}.json").read_text()
        )
        fields = [m["field"] for m in found["memories"]]
        assert fields == ["language"], found["memories"]  # one preference, never two

    check()
    print(f"\nconvergence property: {runs[0]} commands, each maybe SIGKILLed")
