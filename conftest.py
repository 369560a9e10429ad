"""Every code block of README.md and docs/*.md runs as a test (Sybil; docs/writing-docs.md).

- ```` ```python ```` blocks run one by one, each in a fresh namespace (so each is standalone)
  and a fresh temporary working directory, with no broker configured: the embedded default.
- ```` ```sh ```` and ```` ```bash ```` blocks run with ``bash -euo pipefail`` from the
  repository root, with the stores' default paths pointed into a temporary directory
  (``.ditto/`` of the checkout is never touched), a free loopback port in ``$PORT`` and no
  broker configured; each must exit 0.
  A block repeated verbatim runs once per session.
- ``<!-- skip: next "reason" -->`` before a block marks one that cannot run here (Docker, a
  GPU, an external endpoint, a long-running fleet or benchmark); the reason is shown as the
  test's skip reason. Other fences (``text``, ``yaml``, ``promql``, none) are not run.

docs/SPEC.md is the shared specification, kept equal to its source: not parsed here.

Under pytest-xdist (``-n``, as ``scripts/test.sh`` runs), a test marked ``serial`` runs
while no other test runs in any worker (:func:`pytest_runtest_protocol`): the ones that
build or reinstall this checkout (``pip install -e``, ``pip wheel .``, ``python -m build``
write ``build/`` and the egg-info here, and a reinstall removes the package for a moment
from every other process's imports). A code block of the docs that runs ``pip install``
gets the mark here.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from ditto_worker.testing.servers import free_port

# Busy machines (STYLE.md: tests pass with other work running beside them): hypothesis'
# per-example deadline (200 ms) and its "data generation is slow" check measure the
# machine, not the code. Every property still runs its examples; a test that sets its own
# settings keeps them.
settings.register_profile("ditto", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ditto")

try:
    from sybil import Example, Sybil
    from sybil.parsers.markdown import CodeBlockParser, SkipParser
except ImportError:  # the docs extra (part of dev) is missing: only the docs are not run
    from ditto_worker.testing.services import services_required

    if services_required():
        raise  # CI and scripts/test.sh install it: there a missing Sybil is a failure
    Sybil = None  # type: ignore[assignment,misc]
    Example = Any  # type: ignore[assignment,misc]

REPO = Path(__file__).resolve().parent
SHELL_TIMEOUT_S = 180
# Settings a developer's shell may carry that would take a block off the embedded default.
_FOREIGN_ENV = ("DITTO_BROKER_URL", "DITTO_RESULT_BACKEND", "DITTO_WORKER_MEMORY_STORE")


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in _FOREIGN_ENV or name.startswith(("DITTO_WORKER_", "OTEL_")):
            monkeypatch.delenv(name)


def _run_python(example: Example) -> None:
    namespace: dict[str, Any] = example.namespace
    tmp_path: Path = namespace["tmp_path"]
    monkeypatch: pytest.MonkeyPatch = namespace["monkeypatch"]
    _clean_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    # padded so that a traceback names the line of the Markdown file
    source = "\n" * example.line + str(example.parsed)
    code = compile(source, example.path, "exec", dont_inherit=True)
    exec(code, {"__name__": "__docs_example__"})


# A shell block repeated verbatim (the README's commands, again in docs/getting-started.md)
# runs once per session: source -> where it passed.
_PASSED_SHELL: dict[str, str] = {}


def _run_shell(example: Example) -> None:
    source = str(example.parsed)
    if source in _PASSED_SHELL:
        pytest.skip(f"the same block as {_PASSED_SHELL[source]}, which passed in this run")
    namespace: dict[str, Any] = example.namespace
    tmp_path: Path = namespace["tmp_path"]
    monkeypatch: pytest.MonkeyPatch = namespace["monkeypatch"]
    _clean_env(monkeypatch)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["DITTO_WORKER_MEMORY_SQLITE_PATH"] = str(tmp_path / "memory.sqlite")
    env["DITTO_WORKER_MEMORY_QDRANT_PATH"] = str(tmp_path / "qdrant")
    env["PORT"] = str(free_port())  # a block that serves listens on ${PORT:-8080}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", source],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{example.path}:{example.line}: exit {done.returncode}\n"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )
    _PASSED_SHELL[source] = f"{Path(example.path).relative_to(REPO)}:{example.line}"


class _NotRunItem(pytest.Item):
    def runtest(self) -> None:
        pytest.skip("Sybil is not installed: pip install -c constraints.txt -e '.[dev]'")


class _NotRunFile(pytest.File):
    def collect(self) -> Any:
        yield _NotRunItem.from_parent(self, name="code blocks")


def _docs_not_run(file_path: Path, parent: pytest.Collector) -> Any:
    """Without Sybil, each Markdown file is one skipped test saying so."""
    if file_path.name == "README.md" and file_path.parent == REPO:
        return _NotRunFile.from_parent(parent, path=file_path)
    if (
        file_path.suffix == ".md"
        and file_path.parent == REPO / "docs"
        and file_path.name != "SPEC.md"
    ):
        return _NotRunFile.from_parent(parent, path=file_path)
    return None


pytest_collect_file = (
    _docs_not_run
    if Sybil is None
    else Sybil(
        parsers=[
            CodeBlockParser(language="python", evaluator=_run_python),
            CodeBlockParser(language="sh", evaluator=_run_shell),
            CodeBlockParser(language="bash", evaluator=_run_shell),
            SkipParser(),
        ],
        patterns=["README.md", "docs/*.md"],
        excludes=["*/README.md", "docs/SPEC.md"],  # data/locomo/README.md; the shared spec
        fixtures=["tmp_path", "monkeypatch"],
    ).pytest()
)


# --- xdist: a test marked serial runs alone ---------------------------------------------
# A readers-writer lock over the workers (flock on two files in a folder of this run):
# every test holds ``run.lock`` shared; a serial one holds it exclusive. A serial test first
# takes ``turn.lock``, which every test passes through before its shared lock, so that tests
# starting meanwhile wait behind it instead of starving it.


def _lock_folder(config: pytest.Config) -> Path | None:
    """The folder of this run's locks (shared by its workers); None without xdist."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    folder = Path(tempfile.gettempdir()) / f"ditto-pytest-{workerinput['testrunuid']}"
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def _turn(folder: Path, serial: bool) -> Iterator[None]:
    with (folder / "turn.lock").open("ab") as turn, (folder / "run.lock").open("ab") as run:
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(run, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        if not serial:
            fcntl.flock(turn, fcntl.LOCK_UN)  # the next test may start beside this one
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            fcntl.flock(turn, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Setup, call and teardown of ``item`` under the run's lock (xdist only)."""
    folder = _lock_folder(item.config)
    if folder is None:
        return (yield)
    with _turn(folder, item.get_closest_marker("serial") is not None):
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A docs block that runs ``pip install`` (reinstalls this checkout) is ``serial``."""
    for item in items:
        example = getattr(item, "example", None)  # a Sybil item
        if example is not None and "pip install" in str(example.parsed):
            item.add_marker(pytest.mark.serial)
