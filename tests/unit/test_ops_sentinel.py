"""compose.sentinel.yaml (issue 37 item 5): the Redis Sentinel variant of compose.yaml
follows the Compose Specification on its own and merged, points every process that
reaches Redis at the sentinels, and keeps compose.yaml's images and Redis settings (no
Docker engine needed: checked as data, like tests/unit/test_ops_files.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.unit.test_ops_files import compose, compose_schema

REPO = Path(__file__).resolve().parents[2]


def sentinel() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "compose.sentinel.yaml").read_text())
    return data


def merged() -> dict[str, Any]:
    """compose.yaml with the override merged the way Compose merges mappings."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base.get(k), over[k]) if k in over else base[k]
                    for k in {**base, **over}}  # fmt: skip
        return over

    return dict(merge(compose(), sentinel()))


def test_the_sentinel_variant_follows_the_compose_specification() -> None:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    for data in (sentinel(), merged()):
        assert [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(data)] == []


def test_every_redis_client_asks_the_sentinels() -> None:
    services = merged()["services"]
    clients = [n for n, s in compose()["services"].items()
               if "DITTO_BROKER_URL" in (s.get("environment") or {})]  # fmt: skip
    assert {"reads", "writes", "context", "gateway"} <= set(clients)
    for name in clients:
        env = services[name]["environment"]
        for key in ("DITTO_BROKER_URL", "DITTO_WORKER_CONTEXT_REDIS_URL"):
            urls = env[key].split(";")
            assert [u.split("@")[1].split(":")[0] for u in urls] == [
                "sentinel-1", "sentinel-2", "sentinel-3"
            ], (name, key)  # fmt: skip
            assert all(u.startswith("sentinel://:${DITTO_REDIS_PASSWORD") for u in urls)
        assert env["DITTO_SENTINEL_MASTER_NAME"] == "ditto"
        assert env["DITTO_WORKER_CONTEXT_SENTINEL_MASTER_NAME"] == "ditto"
        assert {"redis", "sentinel-1", "sentinel-2", "sentinel-3"} <= set(
            services[name]["depends_on"]
        )


def test_redis_settings_and_images_stay_those_of_compose_yaml() -> None:
    base, over = compose()["services"]["redis"], sentinel()["services"]
    image = base["image"]
    assert over["redis-replica"]["image"] == image
    assert all(over[f"sentinel-{i}"]["image"] == image for i in (1, 2, 3))
    kept = base["command"][-1].split("exec ", 1)[1]
    assert kept in over["redis"]["command"][-1]
    assert f"{kept} --replicaof redis 6379" in over["redis-replica"]["command"][-1]
    for name in ("redis", "redis-replica"):
        assert "masterauth" in over[name]["command"][-1]
    monitor = over["sentinel-1"]["command"][-1]
    assert "sentinel monitor ditto redis 6379 2" in monitor
    assert not any("ports" in over[f"sentinel-{i}"] for i in (1, 2, 3))
