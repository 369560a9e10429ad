"""The layers hold at run time, not only on paper (SPEC.md MEM-RT-5, issue 11).

Each import runs in a fresh interpreter, so what another test imported cannot hide a
dependency: the SDK, the contracts, the runtime and the store plugins must load no Celery,
no broker client and no model library, and importing must open no socket. The wheel
holds every package of the source tree.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TRANSPORT = ("celery", "kombu", "redis", "ditto_worker.fleet", "fastapi", "starlette", "uvicorn")
MODELS = ("torch", "sentence_transformers", "transformers")
SQL_CLIENTS = ("psycopg", "pymysql", "MySQLdb", "sqlalchemy")
"""SQL drivers and pools: only their own store plugin loads one (the core installs none)."""

_PROBE = r"""
import json, socket, sys
opened = []
class Guard(socket.socket):
    def connect(self, address):
        opened.append(repr(address))
        raise OSError("imports must not connect")
    def connect_ex(self, address):
        opened.append(repr(address))
        return 111
socket.socket = Guard
_create = socket.create_connection
def create_connection(address, *args, **kwargs):
    opened.append(repr(address))
    raise OSError("imports must not connect")
socket.create_connection = create_connection
import importlib
importlib.import_module(sys.argv[1])
print(json.dumps({"modules": sorted(sys.modules), "opened": opened}))
"""


def _imported(module: str) -> tuple[set[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, module],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return set(report["modules"]), list(report["opened"])


def _loaded(modules: set[str], roots: tuple[str, ...]) -> set[str]:
    return {m for m in modules for r in roots if m == r or m.startswith(r + ".")}


# the Milvus client and Milvus Lite: the core never imports them (the plugin does, reached
# by entry point; it loads Milvus Lite only when a .db URI is opened)
MILVUS = ("pymilvus", "milvus_lite", "grpc")
DRIVERS = SQL_CLIENTS + MILVUS


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("ditto_worker", TRANSPORT + MODELS + DRIVERS + ("numpy",)),
        ("ditto_worker.contracts", TRANSPORT + MODELS + DRIVERS),
        ("ditto_worker.memory", TRANSPORT + MODELS + DRIVERS),
        ("ditto_worker.runtime", TRANSPORT + MODELS + DRIVERS),
        ("ditto_worker.retrieval", TRANSPORT + MODELS + DRIVERS),
        ("ditto_worker.testing", TRANSPORT + MODELS + DRIVERS),
        ("ditto_worker.memory_tasks", TRANSPORT + MODELS + DRIVERS),
        # numpy comes with the vector extras; the embedded default installs without it
        ("ditto_plugin_sqlite", TRANSPORT + MODELS + DRIVERS + ("numpy",)),
        (
            "ditto_plugin_postgres",
            TRANSPORT + MODELS + ("pymysql", "MySQLdb", "sqlalchemy") + MILVUS,
        ),
        ("ditto_plugin_mysql", TRANSPORT + MODELS + ("psycopg", "MySQLdb") + MILVUS),
        ("ditto_plugin_milvus", TRANSPORT + MODELS + SQL_CLIENTS + ("milvus_lite",)),
    ],
)
def test_import_loads_no_transport_no_model_and_connects_nowhere(
    module: str, forbidden: tuple[str, ...]
) -> None:
    # MEM-RT-5: "imports do not connect or execute"
    modules, opened = _imported(module)
    assert _loaded(modules, forbidden) == set(), module
    assert opened == [], module


@pytest.mark.parametrize(
    "module", ["ditto_worker", "ditto_plugin_sqlite", "ditto_plugin_postgres", "ditto_plugin_mysql"]
)
def test_the_unicode_tokenizer_loads_on_first_non_ascii_text(module: str) -> None:
    # issue 11 (import time): the `regex` module (grapheme clusters) is imported by the
    # keyword tokenizer on its first non-ASCII text, not by importing the SDK or a store
    modules, _ = _imported(module)
    assert "regex" not in modules


RUNTIME_CONFIG = tuple(
    f"ditto_worker.config.{name}" for name in ("runtime", "loading", "fleet", "sections")
)
"""The runtime config models and loader; the CONTEXT and INFER kinds' own sections
(``ditto_worker.config.context`` / ``.infer``) are theirs and load with them."""


@pytest.mark.parametrize("module", ["ditto_worker", "ditto_plugin_sqlite", "ditto_worker.config"])
def test_the_sdk_import_defers_the_runtime_config(module: str) -> None:
    # issue 11: the runtime config models load on first use, not with the SDK; issue 24:
    # ditto_worker.config is one package whose __init__ imports none of them (a name is
    # loaded from its module on first access). Only what is ours to control is asserted
    # (issue 23): which stdlib extension modules a dependency imports (pydantic 2.14 loads
    # _hashlib through `secrets`) is its choice; import time itself is a benchmark figure
    # (bench/imports.py)
    modules, _ = _imported(module)
    assert _loaded(modules, RUNTIME_CONFIG) == set(), module


def test_the_config_package_loads_a_name_from_its_module_on_first_use() -> None:
    # the check above can fail: asking the package for RuntimeConfig loads the models
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from ditto_worker.config import RuntimeConfig; "
         "print(sorted(m for m in sys.modules if m.startswith('ditto_worker.config.')))"],
        capture_output=True, text=True, timeout=120, check=True, cwd=REPO,
    )  # fmt: skip
    assert "ditto_worker.config.runtime" in done.stdout


@pytest.mark.parametrize("module", ["ditto_worker.fleet", "ditto_worker.cli"])
def test_the_fleet_and_the_command_load_no_sql_client(module: str) -> None:
    # issue 27: a store's driver loads only when its plugin is built (by entry point)
    modules, opened = _imported(module)
    assert _loaded(modules, SQL_CLIENTS) == set(), module
    assert opened == []


def test_the_fleet_is_where_celery_lives() -> None:
    # the check above can fail: the fleet does load Celery
    modules, opened = _imported("ditto_worker.fleet")
    assert {"celery", "kombu", "redis"} <= modules
    assert opened == []


def _source_packages() -> set[str]:
    found = {
        ".".join(path.parent.relative_to(REPO).parts)
        for path in (REPO / "ditto_worker").rglob("__init__.py")
        if "__pycache__" not in path.parts
    }
    for path in (REPO / "plugins").glob("*/ditto_plugin_*/__init__.py"):
        found.add(path.parent.name)
    return found


@pytest.mark.slow
@pytest.mark.serial  # builds in this checkout (build/, the egg-info): alone
def test_the_wheel_holds_every_package(tmp_path: Path) -> None:
    # a package missing from [tool.setuptools] packages would be absent from the wheel
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(REPO)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("ditto_worker-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    in_wheel = {
        ".".join(Path(name).parent.parts) for name in names if name.endswith("/__init__.py")
    }
    expected = _source_packages()
    assert expected - in_wheel == set()
    assert {"ditto_worker.memory", "ditto_worker.fleet", "ditto_plugin_sqlite"} <= expected
