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
    deadline = time.monotonic() + 60
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
