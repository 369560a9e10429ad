"""Procfile, compose.yaml and Dockerfile agree and are safe (no Docker engine needed).

compose.yaml is checked as data (PyYAML): each service runs the same program and
arguments as the Procfile line of the same name, once env references take their
defaults (``${VAR:-default}``, compose and sh alike) and the values of host options
(``--bind``, ``--address``: loopback on the host, all interfaces in a container) are set
aside; every published port binds 127.0.0.1; every image is pinned.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from honcho.environ import parse_procfile

from ditto_worker.config import load_runtime_config_file

REPO = Path(__file__).resolve().parents[2]
HOST_OPTIONS = {"--bind", "--address"}
WORKER_GROUPS = ["reads", "writes", "search"]
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[-?]([^}]*))?\}")


def with_defaults(text: str) -> str:
    """``${VAR:-default}`` -> ``default``; a reference without a default is an error."""

    def default(match: re.Match[str]) -> str:
        assert match.group(2) is not None, f"{match.group(0)} has no default"
        return match.group(2)

    return _ENV_REF.sub(default, text)


def normalized(argv: list[str]) -> list[str]:
    """Env references resolved to their defaults; host option values replaced by <host>."""
    out: list[str] = []
    for token in (with_defaults(t) for t in argv):
        name, eq, _ = token.partition("=")
        if eq and name in HOST_OPTIONS:
            out.append(f"{name}=<host>")
        elif out and out[-1] in HOST_OPTIONS:
            out.append("<host>")
        else:
            out.append(token)
    return out


def procfile() -> dict[str, str]:
    return dict(parse_procfile((REPO / "Procfile").read_text()).processes)


def compose() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def compose_argv(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def test_procfile_runs_redis_worker_groups_retrieval_and_flower() -> None:
    assert list(procfile()) == ["redis", "reads", "writes", "search", "retrieval", "flower"]
    argv = shlex.split(procfile()["retrieval"])
    assert argv[:4] == ["ditto-worker", "worker", "--nodes", "retrieval"]
    assert argv[argv.index("--hostname") + 1] == "${HONCHO_PROCESS_NAME:-retrieval}@%h"


def test_worker_lines_are_the_groups_of_ditto_yaml() -> None:
    groups = load_runtime_config_file(REPO / "ditto.yaml", env={}).memory_worker.groups
    assert sorted(groups) == sorted(WORKER_GROUPS)
    for group in WORKER_GROUPS:
        argv = shlex.split(procfile()[group])
        assert argv[:2] == ["ditto-worker", "worker"]
        assert argv[argv.index("--nodes") + 1] == group
        # one Celery node name per honcho process (reads.1, reads.2 …), never a duplicate
        assert argv[argv.index("--hostname") + 1] == f"${{HONCHO_PROCESS_NAME:-{group}}}@%h"


def test_procfile_binds_loopback_only() -> None:
    lines = {name: shlex.split(cmd) for name, cmd in procfile().items()}
    assert lines["redis"][lines["redis"].index("--bind") + 1] == "127.0.0.1"
    assert lines["flower"][lines["flower"].index("--address") + 1] == "127.0.0.1"


@pytest.mark.parametrize("name", ["redis", "reads", "writes", "search", "retrieval", "flower"])
def test_compose_command_matches_the_procfile_line(name: str) -> None:
    service = compose()["services"][name]
    procfile_argv = normalized(shlex.split(procfile()[name]))
    assert normalized(compose_argv(service)) == procfile_argv


def test_worker_lines_differ_only_in_the_group() -> None:
    # the normalization above must not hide a real difference
    assert normalized(shlex.split(procfile()["reads"])) != normalized(
        compose_argv(compose()["services"]["writes"])
    )
    assert normalized(["redis-server", "--bind", "127.0.0.1", "--port", "1"]) == [
        "redis-server",
        "--bind",
        "<host>",
        "--port",
        "1",
    ]


def _host_ip(port: Any) -> str:
    if isinstance(port, dict):  # long syntax
        return str(port.get("host_ip", ""))
    parts = with_defaults(str(port)).split(":")
    return parts[0] if len(parts) == 3 else ""


def test_every_published_port_binds_loopback() -> None:
    published = 0
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert _host_ip(port) == "127.0.0.1", (name, port)
            published += 1
    assert published >= 3  # redis, flower, postgres


def test_worker_groups_scale() -> None:
    # `docker compose up --scale reads=3` needs no fixed name and no fixed host port
    for group in [*WORKER_GROUPS, "retrieval"]:
        service = compose()["services"][group]
        assert "container_name" not in service and "ports" not in service
        assert service["environment"]["DITTO_BROKER_URL"] == "redis://redis:6379/0"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def _tag(image: str) -> str:
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    return last.partition(":")[2] or ("digest" if digest else "")


def test_images_are_pinned() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    images = {name: s["image"] for name, s in compose()["services"].items()}
    assert set(images) >= {"redis", "reads", "writes", "search", "flower", "postgres"}
    for name, image in images.items():
        tag = _tag(image)
        assert tag and tag != "latest" and re.search(r"\d", tag), (name, image)
    assert images["postgres"].startswith("pgvector/pgvector:")
    for name in [*WORKER_GROUPS, "flower"]:  # the project image, built from the Dockerfile
        assert images[name] == f"ditto-worker:{version}"
        assert compose()["services"][name]["build"] == "."
    bases = re.findall(r"^FROM\s+(\S+)", (REPO / "Dockerfile").read_text(), re.M)
    assert bases and all(_tag(b) not in ("", "latest") for b in bases), bases


def test_flower_credentials_come_from_the_environment() -> None:
    flower = compose()["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    for path in ["Procfile", "compose.yaml", "Dockerfile"]:
        assert "--basic_auth" not in (REPO / path).read_text(), path
    assert ".env" in (REPO / ".gitignore").read_text().split()
