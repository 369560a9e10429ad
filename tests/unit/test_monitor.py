"""``ditto-worker flower``: credentials from the environment, /metrics behind auth.

The real requests (401 without credentials, 200 with them) are in
tests/integration/test_procfile.py, against Flower started by honcho.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tornado.web
from typer.testing import CliRunner

from ditto_worker.cli.commands import app
from ditto_worker.errors import ConfigError
from ditto_worker.fleet.monitor import basic_auth_from_env, flower_argv, require_auth_on_metrics


def test_basic_auth_pairs_from_env() -> None:
    assert basic_auth_from_env({"FLOWER_BASIC_AUTH": "ops:s3cret"}) == ["ops:s3cret"]
    assert basic_auth_from_env({"FLOWER_BASIC_AUTH": "a:1,b:2:3"}) == ["a:1", "b:2:3"]


@pytest.mark.parametrize(
    ("value", "secret"),
    [(None, None), ("", None), (",", None), ("nocolon", None), (":pw", "pw"),
     ("user:", None), ("a:s3cret,bad", "s3cret")],
)  # fmt: skip
def test_missing_or_malformed_basic_auth_is_a_config_error(
    value: str | None, secret: str | None
) -> None:
    env = {} if value is None else {"FLOWER_BASIC_AUTH": value}
    with pytest.raises(ConfigError, match="FLOWER_BASIC_AUTH") as info:
        basic_auth_from_env(env)
    assert secret is None or secret not in str(info.value)  # never echoes a password


def test_metrics_route_requires_authentication() -> None:
    from flower import urls
    from flower.views.monitor import Healthcheck, Metrics

    require_auth_on_metrics()
    require_auth_on_metrics()  # idempotent
    routes = [h for h in urls.handlers if isinstance(h, tuple) and h[0] == "/metrics"]
    assert len(routes) == 1
    handler = routes[0][1]
    assert handler is not Metrics and issubclass(handler, Metrics)
    # tornado.web.authenticated wraps get; Flower's own handler has no such wrapper
    assert hasattr(handler.get, "__wrapped__") and not hasattr(Metrics.get, "__wrapped__")
    assert handler.get.__wrapped__.__qualname__.endswith("AuthenticatedMetrics.get")
    assert tornado.web.authenticated.__module__ == "tornado.web"
    # the liveness probe stays open: it carries no data
    assert ("/healthcheck", Healthcheck) in urls.handlers


def test_flower_argv_uses_tornado_option_syntax() -> None:
    assert flower_argv("127.0.0.1", 5555) == ["flower", "--address=127.0.0.1", "--port=5555"]
    assert flower_argv("0.0.0.0", 0, ["--purge_offline_workers=60"])[-1] == (
        "--purge_offline_workers=60"
    )


def test_flower_command_refuses_to_start_without_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    result = CliRunner().invoke(app, ["flower", "--broker", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2
    assert "FLOWER_BASIC_AUTH is not set" in result.output
    monkeypatch.delenv("DITTO_BROKER_URL", raising=False)
    result = CliRunner().invoke(app, ["flower"])
    assert result.exit_code == 2 and "no broker configured" in result.output
