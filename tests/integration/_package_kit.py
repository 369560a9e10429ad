"""What the installed-package tests share (``test_installed_wheel.py``,
``test_package_gate.py``): one sdist and wheel of this checkout per test run, and a fresh
virtual environment per test whose third-party dependencies come from a per-machine cache.

* :func:`built_package` (a session fixture): ``python -m build --sdist --wheel`` of the
  checkout, run once per test run — under pytest-xdist the first worker to ask builds
  (under a file lock in the run's shared temporary folder), the others wait and reuse it.
  The wheel is built from the sdist, so it also proves the sdist carries what the wheel
  needs. Never cached across runs: it is this checkout's code.
* :func:`fresh_venv`: a new virtual environment in a temporary folder with the wheel
  installed (``pip install --no-deps``) and its dependencies (``ditto-worker[EXTRAS]`` at
  the versions of ``constraints.txt``, plus mypy at the version of this interpreter's)
  seen through a ``.pth`` line into a dependency environment under the user cache folder
  (``$XDG_CACHE_HOME/ditto-worker/package-deps/KEY`` or ``~/.cache/ditto-worker/…``), made
  once per key. ``pip check`` then asserts that every requirement of the installed wheel
  is met there.

Why reusing the dependency environment is safe: its key is a SHA-256 of everything that
decides what ``pip install -c constraints.txt WHEEL[EXTRAS] mypy==V`` resolves to — the
wheel's own ``Requires-Dist`` / ``Provides-Extra`` lines (so a changed, added or removed
dependency makes a new one), the extras asked, the constraints file's content, mypy's
version, the Python version and interpreter, and pip's configuration (``pip config list``:
the index and find-links in use). The dependency environment never holds ditto-worker
itself (it is uninstalled after the resolution), so the code under test always comes from
this run's wheel, in a venv made for the test. It is written under an exclusive lock and
marked ready last; a half-made one (a killed run) is made again.

``DITTO_CONSTRAINTS=none`` (the manual check against the newest releases, README) installs
without the constraints file and without the cache: a new resolution from the index every
time, as a newcomer's ``pip install`` would.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import pytest
from filelock import FileLock

REPO: Final = Path(__file__).resolve().parents[2]
CONSTRAINTS: Final = REPO / "constraints.txt"


def cache_root() -> Path:
    """The per-user cache folder of the test suite (``$XDG_CACHE_HOME/ditto-worker`` or
    ``~/.cache/ditto-worker``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ditto-worker"


def clean_env() -> dict[str, str]:
    """This process's environment without the suite's and the virtualenv's variables."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("DITTO_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    """Run ``args``; its stdout. Fails with both outputs on a non-zero exit."""
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args[:4]} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing, with its folder) while the block runs
    (``filelock``: across processes, e.g. pytest-xdist workers and concurrent runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        yield


@pytest.fixture(scope="session")
def built_package(tmp_path_factory: pytest.TempPathFactory, request: Any) -> tuple[Path, Path]:
    """``(sdist, wheel)`` of this checkout, built once per test run (module docstring)."""
    workerinput: dict[str, Any] | None = getattr(request.config, "workerinput", None)
    if workerinput is None:
        shared = tmp_path_factory.getbasetemp() / "package"
    else:  # the workers' base folders share one parent per run
        shared = tmp_path_factory.getbasetemp().parent / f"package-{workerinput['testrunuid']}"
    dist = shared / "dist"
    with _locked(shared / "build.lock"):
        if not (shared / "built").exists():
            shutil.rmtree(dist, ignore_errors=True)
            run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist),
                 str(REPO)], shared, clean_env())  # fmt: skip
            (shared / "built").touch()
    (sdist,) = dist.glob("ditto_worker-*.tar.gz")
    (wheel,) = dist.glob("ditto_worker-*.whl")
    return sdist, wheel


def _requirements_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(meta).decode("utf-8")
    fields = ("Requires-Dist:", "Provides-Extra:", "Requires-Python:")
    return [line for line in text.splitlines() if line.startswith(fields)]


def _dependency_env(wheel: Path, extras: str, env: dict[str, str]) -> Path:
    """The cached dependency environment's root for ``wheel[extras]`` (made when missing)."""
    pip_config = run([sys.executable, "-m", "pip", "config", "list"], REPO, env)
    key_text = "\n".join([
        *_requirements_of(wheel), f"extras={extras}", CONSTRAINTS.read_text(encoding="utf-8"),
        f"mypy=={version('mypy')}", sys.version, sys.base_prefix, pip_config,
    ])  # fmt: skip
    key = hashlib.sha256(key_text.encode("utf-8")).hexdigest()[:24]
    root = cache_root() / "package-deps" / key
    ready = root / ".ready"
    with _locked(root.with_suffix(".lock")):
        if ready.exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(root)], root.parent, env)
        python = str(root / "bin" / "python")
        run([python, "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), f"{wheel}{extras}",
             f"mypy=={version('mypy')}"], root.parent, env)  # fmt: skip
        run([python, "-m", "pip", "uninstall", "-q", "-y", "ditto-worker"], root.parent, env)
        (root / "key.txt").write_text(key_text, encoding="utf-8")
        ready.touch()
    return root


def _site_packages(python: Path, env: dict[str, str]) -> str:
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return run([str(python), "-c", ask], python.parent, env).strip()


def fresh_venv(where: Path, wheel: Path, extras: str, env: dict[str, str]) -> Path:
    """A new virtual environment at ``where`` with ``wheel`` installed and its dependencies
    (``wheel[extras]``) met (module docstring); returns its ``bin`` folder."""
    bin_dir = where / "bin"
    python = bin_dir / "python"
    if os.environ.get("DITTO_CONSTRAINTS") == "none":  # a new resolution, nothing cached
        run([sys.executable, "-m", "venv", str(where)], where.parent, env)
        run([str(python), "-m", "pip", "install", "-q", f"{wheel}{extras}",
             f"mypy=={version('mypy')}"], where.parent, env)  # fmt: skip
        return bin_dir
    deps = _dependency_env(wheel, extras, env)
    run([sys.executable, "-m", "venv", "--without-pip", str(where)], where.parent, env)
    theirs = _site_packages(deps / "bin" / "python", env)
    line = f"import site; site.addsitedir({theirs!r})\n"
    Path(_site_packages(python, env), "ditto_deps.pth").write_text(line, encoding="utf-8")
    # pip comes from the dependency environment; it installs into this venv (sys.prefix)
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], where.parent, env)
    installed = run([str(python), "-c", "import ditto_worker; print(ditto_worker.__file__)"],
                    where.parent, env)  # fmt: skip
    assert Path(installed.strip()).is_relative_to(where), installed  # ours, not a cached one
    run([str(python), "-m", "pip", "check"], where.parent, env)  # every requirement is met
    return bin_dir
