"""The ``ditto-worker`` command as a user runs it: demo (in-process, on Redis), invoke."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EVENT_WAIT_S

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = REPO / "data" / "locomo" / "30.json"


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ditto_worker", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def first_recall_at_10(stdout: str) -> float:
    line = next(line for line in stdout.splitlines() if "recall@10" in line)
    return float(re.search(r"\d+(?:\.\d+)?", line).group())


def check_demo_output(stdout: str) -> None:
    recall = first_recall_at_10(stdout)
    assert recall >= 0.5, stdout  # a plain OR-of-terms BM25 gets about 0.6 on 30.json
    for node in (
        "MEMORY.WRITE",
        "MEMORY.GET",
        "MEMORY.QUERY",
        "MEMORY.SEARCH",
        "MEMORY.UPDATE",
        "MEMORY.DELETE",
    ):
        assert re.search(rf"^{re.escape(node)}\s+\d+\s+[\d.]+\s+[\d.]+$", stdout, re.M), node
    assert "369 turns written, 105 questions" in stdout


@pytest.mark.slow
def test_demo_in_process_on_30_json(tmp_path: Path) -> None:
    env = {"DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": ""}
    result = cli("demo", "--conversation", str(CONVERSATION), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    check_demo_output(result.stdout)
    assert "MEMORY.WRITE" in result.stderr  # the progress bar
    assert not (tmp_path / ".ditto").exists()  # a fresh store of its own, removed after
    # the in-process worker serves MEMORY and RETRIEVAL only: no local INFER model is
    # started, no CONTEXT cache built (they warned on stderr when it did)
    assert "INFER" not in result.stderr and "CONTEXT" not in result.stderr, result.stderr


@pytest.fixture
def worker_process(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """``ditto-worker worker`` as a separate process tree on the test Redis."""
    env = {
        **os.environ,
        "DITTO_BROKER_URL": redis_url,
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "fleet.sqlite"),
    }
    log = (tmp_path / "worker.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ditto_worker",
            "worker",
            "--concurrency",
            "2",
            "--loglevel",
            "INFO",
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + EVENT_WAIT_S
    while "ready." not in (tmp_path / "worker.log").read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        time.sleep(0.2)
    yield proc
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.mark.integration
@pytest.mark.slow
def test_demo_against_separately_started_worker(
    worker_process: subprocess.Popen[str], redis_url: str, tmp_path: Path
) -> None:
    result = cli("demo", "--broker", redis_url, "--conversation", str(CONVERSATION), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    check_demo_output(result.stdout)
    assert "redis broker" in result.stdout
    # the worker built its SQLite store from the entry point, at the path from the env
    assert (tmp_path / "fleet.sqlite").exists()


def test_invoke_prints_one_json_object_and_shares_the_store(tmp_path: Path) -> None:  # MEM-PY-8/9
    env = {"DITTO_BROKER_URL": "", "DITTO_WORKER_MEMORY_SQLITE_PATH": ""}
    wrote = cli(
        "invoke",
        "MEMORY.WRITE",
        '{"memories": [{"key": "pref", "content": {"lang": "zh-CN"}}]}',
        cwd=tmp_path,
        env=env,
    )
    assert wrote.returncode == 0, wrote.stderr
    result = json.loads(wrote.stdout)
    assert result["status"] == "success" and result["node"] == "MEMORY.WRITE"
    assert result["output"][0]["key"] == "pref" and result["executionId"]
    assert (tmp_path / ".ditto" / "memory.sqlite").exists()
    got = cli("invoke", "MEMORY.GET", '{"keys": ["pref"]}', cwd=tmp_path, env=env)
    assert json.loads(got.stdout)["output"][0]["content"] == {"lang": "zh-CN"}
    bad = cli("invoke", "MEMORY.QUERY", '{"limit": 0}', cwd=tmp_path, env=env)
    assert bad.returncode == 1
    assert len(bad.stdout.strip().splitlines()) == 1
    assert json.loads(bad.stdout)["error"]["code"] == "INVALID_INPUT"
    unknown = cli("invoke", "MEMORY.NOPE", "{}", cwd=tmp_path, env=env)
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["error"]["code"] == "UNKNOWN_NODE"


SAMPLE = REPO / "ditto_worker" / "cli" / "samples" / "conversation.json"
ALICE = "tenant=acme,user=alice"
BOB = "tenant=acme,user=bob"


def test_demo_keeps_its_store_in_a_temporary_folder_deleted_at_exit(tmp_path: Path) -> None:
    # what --help says (issue 23 item 5): nothing in ./.ditto/, the temporary folder gone
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": "", "TMPDIR": str(temp)}
    result = cli("demo", "--conversation", str(SAMPLE), "--scope", ALICE, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "store sqlite (a temporary file, deleted at exit)" in result.stdout
    assert "43 turns written" in result.stdout
    assert not (tmp_path / ".ditto").exists()
    assert not [p for p in temp.iterdir() if p.name.startswith("ditto-demo-")]


def test_invoke_scope_in_process_confines_the_calls(tmp_path: Path) -> None:
    env = {"DITTO_BROKER_URL": "", "DITTO_WORKER_MEMORY_SQLITE_PATH": ""}
    draft = '{"memories": [{"key": "pref", "content": "tea"}]}'
    wrote = cli("invoke", "MEMORY.WRITE", draft, "--scope", ALICE, cwd=tmp_path, env=env)
    assert wrote.returncode == 0, wrote.stderr
    get = '{"keys": ["pref"]}'
    mine = cli("invoke", "MEMORY.GET", get, "--scope", ALICE, cwd=tmp_path, env=env)
    theirs = cli("invoke", "MEMORY.GET", get, "--scope", BOB, cwd=tmp_path, env=env)
    unscoped = cli("invoke", "MEMORY.GET", get, cwd=tmp_path, env=env)
    assert [m["content"] for m in json.loads(mine.stdout)["output"]] == ["tea"]
    assert json.loads(theirs.stdout)["output"] == []
    assert json.loads(unscoped.stdout)["output"] == []


@pytest.mark.integration
def test_invoke_scope_on_a_fleet_worker(redis_url: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DITTO_BROKER_URL": redis_url,
        "DITTO_WORKER_CONTEXT_REDIS_URL": redis_url,
        "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "fleet.sqlite"),
    }
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "memory,context",
         "--pool", "solo", "--loglevel", "INFO"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + EVENT_WAIT_S
        while "ready." not in (tmp_path / "worker.log").read_text():
            assert worker.poll() is None and time.monotonic() < deadline, log_of(tmp_path)
            time.sleep(0.2)
        item = {"id": "n1", "sourceNode": "MEMORY.SEARCH", "content": "tea"}
        update = json.dumps({"name": "plan", "ingress": [item]})
        denied = cli("invoke", "CONTEXT.UPDATE", update, cwd=tmp_path, env=env)
        error = json.loads(denied.stdout)["error"]
        assert denied.returncode == 1 and error["code"] == "PERMISSION_DENIED", denied.stdout
        assert "scope=" in error["message"] and "--scope tenant=" in error["message"]
        done = cli("invoke", "CONTEXT.UPDATE", update, "--scope", ALICE, cwd=tmp_path, env=env)
        assert json.loads(done.stdout)["status"] == "success", done.stdout
        load = '{"name": "plan"}'
        mine = cli("invoke", "CONTEXT.LOAD", load, "--scope", ALICE, cwd=tmp_path, env=env)
        theirs = cli("invoke", "CONTEXT.LOAD", load, "--scope", BOB, cwd=tmp_path, env=env)
        assert [i["id"] for i in json.loads(mine.stdout)["output"]["items"]] == ["n1"]
        assert json.loads(theirs.stdout)["output"]["found"] is False

        draft = '{"memories": [{"key": "pref", "content": "tea"}]}'
        wrote = cli("invoke", "MEMORY.WRITE", draft, "--scope", ALICE, cwd=tmp_path, env=env)
        assert wrote.returncode == 0, wrote.stdout + wrote.stderr
        get = '{"keys": ["pref"]}'
        mine = cli("invoke", "MEMORY.GET", get, "--scope", ALICE, cwd=tmp_path, env=env)
        theirs = cli("invoke", "MEMORY.GET", get, "--scope", BOB, cwd=tmp_path, env=env)
        assert [m["content"] for m in json.loads(mine.stdout)["output"]] == ["tea"]
        assert json.loads(theirs.stdout)["output"] == []
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "worker.log").read_text()[-3000:]
