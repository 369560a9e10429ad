"""``ditto-worker example`` after the README's base install (issue 35 item 9): when an extra
the task needs is missing it fails before it creates anything, with one line naming the
extra. A base install is simulated by hiding the extra's modules from ``find_spec``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ditto_worker.cli.commands import app


def _without(monkeypatch: pytest.MonkeyPatch, *hidden: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name in hidden else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        (("httpx",), ["write"], "infer"),
        (("xllamacpp",), ["search"], "infer"),
        (("qdrant_client",), ["search", "--backend", "qdrant"], "qdrant"),
        (("psycopg",), ["update", "--backend", "postgres"], "postgres"),
    ],
)
def test_a_missing_extra_is_one_line_and_nothing_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: tuple[str, ...], args: list[str],
    extra: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DITTO_WORKER_INFER_BASE_URL", raising=False)
    _without(monkeypatch, *hidden)
    result = CliRunner().invoke(app, ["example", *args])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert f"needs the '{extra}' extra: pip install -e '.[{extra}]'" in line
    assert list(tmp_path.iterdir()) == []  # no task directory, no .examples-memory-tasks


def test_an_endpoint_needs_no_local_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ditto_worker.cli.example import _missing_extra
    from ditto_worker.config import load_runtime_config

    _without(monkeypatch, "xllamacpp")
    with_url = {"workers": {"infer": {"baseUrl": "http://127.0.0.1:9/v1"}}}
    assert _missing_extra("sqlite", load_runtime_config(with_url, env={})) is None
    assert _missing_extra("sqlite", load_runtime_config(None, env={})) == "infer"
