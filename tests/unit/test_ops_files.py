"""Procfile, compose.yaml and Dockerfile agree and are safe (no Docker engine needed).

compose.yaml is checked as data (PyYAML) and against the Compose Specification's JSON schema
(the copy check-jsonschema ships; no Docker engine runs here): each service runs the same
program and arguments as the Procfile line of the same name, once env references take
their defaults (``${VAR:-default}``, compose and sh alike) and the values of host options
(``--bind``, ``--address``: loopback on the host, all interfaces in a container) are set
aside; every published port binds 127.0.0.1; every image is pinned (external ones by
digest); Redis is durable and password-protected; workers stop after Redis and within
their grace period; the Dockerfile installs the dependencies before it copies the source.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from honcho.environ import parse_procfile

from ditto_worker.config import load_runtime_config_file

REPO = Path(__file__).resolve().parents[2]
HOST_OPTIONS = {"--bind", "--address", "--host"}
WORKER_GROUPS = ["reads", "writes", "search"]
WORKERS = [*WORKER_GROUPS, "retrieval", "context", "infer"]
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


def test_procfile_runs_the_workers_and_flower_but_not_redis() -> None:
    # Redis is started apart: honcho stops every process at once (issue 14 item 1)
    assert list(procfile()) == [*WORKERS, "flower", "gateway"]
    assert "redis-server" not in (REPO / "Procfile").read_text().split("#")[-1]
    for kind in ["retrieval", "context", "infer"]:
        argv = shlex.split(procfile()[kind])
        assert argv[:4] == ["ditto-worker", "worker", "--nodes", kind]
        assert argv[argv.index("--hostname") + 1] == f"${{HONCHO_PROCESS_NAME:-{kind}}}@%h"


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
    assert lines["flower"][lines["flower"].index("--address") + 1] == "127.0.0.1"
    assert lines["gateway"][lines["gateway"].index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize("name", [*WORKERS, "flower", "gateway"])
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
    for group in WORKERS:
        service = compose()["services"][group]
        assert "container_name" not in service and "ports" not in service
        url = service["environment"]["DITTO_BROKER_URL"]
        assert url.startswith("redis://:${DITTO_REDIS_PASSWORD:?") and url.endswith("@redis:6379/0")
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def _tag(image: str) -> str:
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    return last.partition(":")[2] or ("digest" if digest else "")


DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# no published digest of their tags could be looked up here
UNDIGESTED = ("qdrant/qdrant:", "milvusdb/milvus:", "quay.io/coreos/etcd:", "minio/minio:")


def test_images_are_pinned() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    images = {name: s["image"] for name, s in compose()["services"].items()}
    assert set(images) >= {"redis", *WORKERS, "flower", "postgres"}
    for name, image in images.items():
        tag = _tag(image)
        assert tag and tag != "latest" and re.search(r"\d", tag), (name, image)
        if not image.startswith(("ditto-worker", *UNDIGESTED)):  # pulled: tag and digest
            assert DIGEST.search(image), (name, image)
    assert images["postgres"].startswith("pgvector/pgvector:")
    for name in [*WORKER_GROUPS, "retrieval", "context", "flower"]:  # built from the Dockerfile
        assert images[name] == f"ditto-worker:{version}"
        assert compose()["services"][name]["build"] == "."
    assert images["infer"] == f"ditto-worker-infer:{version}"
    extras = compose()["services"]["infer"]["build"]["args"]["EXTRAS"]
    assert extras == "ops,postgres,qdrant,milvus,mysql,gateway,infer"
    bases = re.findall(r"^FROM\s+(\S+)", (REPO / "Dockerfile").read_text(), re.M)
    assert bases and all(_tag(b) not in ("", "latest") and DIGEST.search(b) for b in bases)


def compose_schema() -> dict[str, Any]:
    """The Compose Specification's JSON schema, as check-jsonschema vendors it."""
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendor / "compose-spec.json").read_text())
    return schema


def test_compose_file_follows_the_compose_specification() -> None:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []
    broken = compose()
    broken["services"]["reads"]["healtcheck"] = broken["services"]["reads"].pop("healthcheck")
    assert not validator.is_valid(broken)  # the schema does catch a misspelt key


def test_redis_is_durable_and_needs_a_password() -> None:
    redis = compose()["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert "--dir /data" in command and "ditto-redis:/data" in redis["volumes"]
    assert "ditto-redis" in compose()["volumes"]
    # the password comes from the environment, into a config file, never onto argv
    assert "requirepass" in command and "--requirepass" not in command
    assert redis["environment"]["DITTO_REDIS_PASSWORD"].startswith("${DITTO_REDIS_PASSWORD:?")
    assert "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_workers_stop_gracefully_before_redis() -> None:
    config = load_runtime_config_file(REPO / "ditto.yaml", env={})
    for name in WORKERS:
        service = compose()["services"][name]
        # SIGTERM (warm shutdown), SIGKILL only after the longest call could end
        grace = _seconds(service["stop_grace_period"])
        longest = config.fleet.call_timeout_s
        if name == "infer":
            longest = config.infer_worker.request_timeout_s
        assert grace > longest, (name, grace, longest)
        # depends_on: compose stops the workers before Redis
        assert "redis" in service["depends_on"]
        check = " ".join(service["healthcheck"]["test"])
        assert f"inspect ping -d {name}@$$HOSTNAME" in check, check
    assert "STOPSIGNAL SIGTERM" in (REPO / "Dockerfile").read_text()
    unit = (REPO / "docs" / "ops" / "ditto-worker@.service").read_text()
    assert "KillMode=mixed" in unit and "KillSignal=SIGTERM" in unit
    assert _seconds(re.search(r"TimeoutStopSec=(\d+)", unit).group(1) + "s") > 30  # type: ignore[union-attr]


def test_dockerfile_installs_dependencies_before_the_source() -> None:
    lines = (REPO / "Dockerfile").read_text().splitlines()
    install = next(i for i, line in enumerate(lines) if "-r /tmp/requirements.txt" in line)
    source = next(i for i, line in enumerate(lines) if line.startswith("COPY ditto_worker"))
    assert install < source
    copied_before = " ".join(line for line in lines[:install] if line.startswith("COPY"))
    assert "ditto_worker" not in copied_before and "pyproject.toml" in copied_before
    # the image installs the versions the tests passed with (issue 23 item 1)
    assert "constraints.txt" in copied_before and "-c constraints.txt" in lines[install]
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "requirements.py"), "ops,infer",
         str(REPO / "pyproject.toml")],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "flower==2.2.0" in out and "xllamacpp" in " ".join(out)
    assert any(r.startswith("celery") for r in out) and not any("ditto-worker" in r for r in out)


def test_flower_credentials_come_from_the_environment() -> None:
    flower = compose()["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    for path in ["Procfile", "compose.yaml", "Dockerfile"]:
        assert "--basic_auth" not in (REPO / path).read_text(), path
    assert ".env" in (REPO / ".gitignore").read_text().split()


OPS = REPO / "docs" / "ops"
SERIES = re.compile(r"\b((?:ditto|flower)_[a-z_]+|up)\b")


def exported_series() -> set[str]:
    """Every series name ``ditto-worker flower``'s /metrics can serve: Flower's metric
    families (as Flower registers them) and ours."""
    from flower.events import get_prometheus_metrics
    from prometheus_client import REGISTRY

    from ditto_worker.fleet.metrics import NODE_CALLS, QueueCollector

    get_prometheus_metrics()  # registers Flower's families on the default registry
    families = [f.name for f in REGISTRY.collect() if f.name.startswith("flower_")]
    families += [f.name for f in NODE_CALLS.collect()]
    families += [f.name for f in QueueCollector(app=None).describe()]
    suffixes = ("", "_total", "_bucket", "_sum", "_count")
    return {name + suffix for name in families for suffix in suffixes} | {"up"}


def test_grafana_dashboard_loads_and_uses_exported_series() -> None:
    dashboard = json.loads((OPS / "grafana-dashboard.json").read_text())  # loads: valid JSON
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels) >= 6
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert all(p["targets"] and {"x", "y", "w", "h"} <= set(p["gridPos"]) for p in panels)
    known = exported_series()
    for expr in exprs:
        used = set(SERIES.findall(expr))
        assert used and used <= known, (expr, used - known)
    text = " ".join(exprs)
    for needed in ["ditto_node_calls_total", "ditto_queue_messages",
                   "flower_task_runtime_seconds_bucket"]:  # fmt: skip
        assert needed in text
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "node"} <= variables


def test_alert_rules_cover_backlog_failures_and_p95() -> None:
    rules = yaml.safe_load((OPS / "alerts.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert {"DittoQueueBacklog", "DittoNodeFailureRate", "DittoNodeSlow",
            "DittoBrokerDown"} <= set(alerts)  # fmt: skip
    known = exported_series()
    for name, rule in alerts.items():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert re.fullmatch(r"\d+[smh]", rule["for"]) and rule["labels"]["severity"], name
        used = set(SERIES.findall(rule["expr"]))
        assert used and used <= known, (name, used - known)
    assert "histogram_quantile(0.95" in alerts["DittoNodeSlow"]["expr"]
    assert "code" in alerts["DittoNodeFailureRate"]["expr"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_alert_rules_pass_promtool() -> None:
    out = subprocess.run(["promtool", "check", "rules", str(OPS / "alerts.yml")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_context_and_infer_workers_get_their_endpoints() -> None:
    # both lines leave pool and concurrency to the kind (threads; 8 and 1: issues 15, 16)
    for kind in ["context", "infer"]:
        argv = shlex.split(procfile()[kind])
        assert "--concurrency" not in argv and "--pool" not in argv
        assert normalized(compose_argv(compose()["services"][kind])) == normalized(argv)
    services = compose()["services"]
    context = services["context"]["environment"]
    assert context["DITTO_WORKER_CONTEXT_REDIS_URL"].endswith("@redis:6379/1")  # its own db
    infer = services["infer"]
    for name in ["BASE_URL", "MODEL", "API_KEY"]:  # from the env or .env; empty by default
        assert infer["environment"][f"DITTO_WORKER_INFER_{name}"] == (
            f"${{DITTO_WORKER_INFER_{name}:-}}"
        )
    # an empty endpoint starts the packaged local model: the image has the infer extra, and
    # the model is joined into a folder the image's user may write (its home is not)
    assert "infer" in infer["build"]["args"]["EXTRAS"].split(",")
    assert infer["image"] != services["reads"]["image"]
    assert infer["environment"]["XDG_CACHE_HOME"].startswith("/data/")
    assert "- ditto-data:/data" in (REPO / "compose.yaml").read_text()
    # the shared worker settings reach it too (one anchor)
    assert infer["environment"]["DITTO_WORKER_MEMORY_SQLITE_PATH"] == "/data/memory.sqlite"


def test_the_mysql_profile_points_every_worker_at_its_mariadb() -> None:
    # `DITTO_WORKER_MEMORY_STORE=mysql docker compose --profile mysql up` (docs/stores-mysql.md):
    # the tested server, the store's URL in every worker, the driver in every worker image
    services = compose()["services"]
    server = services["mariadb"]
    assert server["profiles"] == ["mysql"] and server["image"].startswith("mariadb:10.11.")
    env = server["environment"]
    assert env["MARIADB_USER"] == "ditto" and env["MARIADB_DATABASE"] == "ditto"
    password = env["MARIADB_PASSWORD"]
    assert password.startswith("${DITTO_MYSQL_PASSWORD")
    url = f"mysql://ditto:{password}@mariadb:3306/ditto"
    for name in WORKERS:
        worker = services[name]
        assert worker["environment"]["DITTO_WORKER_MEMORY_MYSQL_URL"] == url, name
        assert worker["depends_on"]["mariadb"] == {
            "condition": "service_healthy", "required": False}  # fmt: skip
    default = re.search(r"^ARG EXTRAS=(\S+)", (REPO / "Dockerfile").read_text(), re.M)
    assert default is not None and "mysql" in default.group(1).split(",")
    assert "mysql" in services["infer"]["build"]["args"]["EXTRAS"].split(",")


def test_compose_points_workers_at_postgres() -> None:
    """With ``--profile postgres`` every worker can use the PostgreSQL store: its URL names
    the compose service with the same user, password and database, and the images carry
    the ``postgres`` extra (psycopg)."""
    services = compose()["services"]
    server = services["postgres"]
    assert server["profiles"] == ["postgres"]
    env = server["environment"]
    password = env["POSTGRES_PASSWORD"]
    url = f"postgresql://{env['POSTGRES_USER']}:{password}@postgres:5432/{env['POSTGRES_DB']}"
    for name in WORKERS:
        worker = services[name]
        assert worker["environment"]["DITTO_WORKER_MEMORY_POSTGRES_URL"] == url, name
        assert worker["depends_on"]["postgres"] == {
            "condition": "service_healthy", "required": False}  # fmt: skip
    default = re.search(r"^ARG EXTRAS=(\S+)", (REPO / "Dockerfile").read_text(), re.M)
    assert default is not None and "postgres" in default.group(1).split(",")
    assert "postgres" in services["infer"]["build"]["args"]["EXTRAS"].split(",")
