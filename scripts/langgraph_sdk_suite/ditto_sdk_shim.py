"""pytest plugin (``-p ditto_sdk_shim``) for langgraph-sdk's store integration tests run
against ``ditto-worker serve``: every ``httpx.Client`` / ``httpx.AsyncClient`` the tests
build (their fixtures build raw ones, with no credentials) gets the header ``x-api-key:
$DITTO_SDK_API_KEY``, and each test's requests answered by the server are counted; one
JSON line per test goes to ``$DITTO_SDK_REPORT``: ``{"nodeid", "outcome", "requests"}``.
Run by scripts/langgraph_sdk_suite/run.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

_SEEN: dict[str, int] = {"requests": 0}


def _count(response: httpx.Response) -> None:
    _SEEN["requests"] += 1


async def _acount(response: httpx.Response) -> None:
    _SEEN["requests"] += 1


def _with_key(cls: type[Any], hook: Any) -> None:
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        headers = dict(kwargs.pop("headers", None) or {})
        headers.setdefault("x-api-key", os.environ["DITTO_SDK_API_KEY"])
        hooks = dict(kwargs.pop("event_hooks", None) or {})
        hooks["response"] = [*hooks.get("response", []), hook]
        original(self, *args, headers=headers, event_hooks=hooks, **kwargs)

    cls.__init__ = __init__


def pytest_configure(config: pytest.Config) -> None:
    _with_key(httpx.Client, _count)
    _with_key(httpx.AsyncClient, _acount)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    _SEEN["requests"] = 0
    outcomes: list[str] = []
    item.ditto_outcomes = outcomes  # type: ignore[attr-defined]
    yield
    outcome = "passed"
    if "failed" in outcomes:
        outcome = "failed"
    elif "skipped" in outcomes and "passed" not in outcomes:
        outcome = "skipped"
    with open(os.environ["DITTO_SDK_REPORT"], "a", encoding="utf-8") as out:
        line = {"nodeid": item.nodeid, "outcome": outcome, "requests": _SEEN["requests"]}
        out.write(json.dumps(line) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    outcomes = getattr(item, "ditto_outcomes", None)
    if outcomes is not None and (report.when == "call" or report.outcome != "passed"):
        outcomes.append(report.outcome)
