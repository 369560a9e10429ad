"""Fair admission's parts (issue 37 item 1): the token bucket, the per-identity shares of
slots and reading places, the gauge, the JSON limits, and the gateway keys' environment
rule. The same behaviour over a real server: tests/integration/test_gateway_guards.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_worker.gateway.admission import Admission, TokenBucket
from ditto_worker.gateway.errors import GatewayError
from ditto_worker.gateway.guard import json_depth_ok, parse_json
from ditto_worker.gateway.settings import GatewaySettings, _with_env, load_gateway_settings


class Gauge:
    def __init__(self) -> None:
        self.values: list[float] = []

    def set(self, value: float) -> None:
        self.values.append(value)


def test_the_bucket_spends_refills_and_says_how_long_to_wait() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(0.5)  # one token in half a second
    assert bucket.take(100.5) == 0.0
    assert bucket.take(110.0) == 0.0 and bucket.tokens == pytest.approx(2.0)  # capped at 3


def test_one_identitys_share_leaves_the_rest_to_others() -> None:
    gauge = Gauge()
    admission = Admission(GatewaySettings(max_in_flight=4, identity_share=0.5), gauge)
    admission.enter("a")
    admission.enter("a")
    with pytest.raises(GatewayError) as refused:
        admission.enter("a")
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
    admission.enter("b")
    admission.enter("b")
    with pytest.raises(GatewayError):  # every slot taken
        admission.enter("c")
    assert not admission.idle.is_set() and gauge.values == [1, 2, 3, 4]
    for key in ("a", "a", "b", "b"):
        admission.leave(key)
    assert admission.idle.is_set() and gauge.values[-1] == 0 and admission.in_flight == 0


def test_reading_places_are_per_identity_and_given_back() -> None:
    admission = Admission(GatewaySettings(max_in_flight=4, identity_share=0.25))
    admission.start_reading("a")
    with pytest.raises(GatewayError):
        admission.start_reading("a")
    admission.start_reading("b")
    admission.stop_reading("a")
    admission.start_reading("a")


def test_the_rate_is_per_identity_with_retry_after() -> None:
    admission = Admission(GatewaySettings(identity_rate_per_s=0.5, identity_burst=2))
    admission.check_rate("a")
    admission.check_rate("a")
    with pytest.raises(GatewayError) as refused:
        admission.check_rate("a")
    assert refused.value.code == "OVERLOADED" and refused.value.headers["Retry-After"] == "2"
    admission.check_rate("b")  # another identity's bucket is full


def test_json_limits() -> None:
    nested = {"a": [1, {"b": []}]}  # four levels
    assert json_depth_ok(nested, 4) and not json_depth_ok(nested, 3)
    assert json_depth_ok(1, 1) and json_depth_ok([], 1)
    assert parse_json(b'{"a": [1]}', 2) == ({"a": [1]}, None)
    for bad in (b"[" * 5000 + b"]" * 5000, b"[[[1]]]", b'"\\udc00"', b"NaN", b"\xff", b"{"):
        data, problem = parse_json(bad, 2)
        assert data is None and problem is not None and problem.startswith("Invalid input")
    assert parse_json(b'"\\ud83d\\ude00"', 2) == ("\U0001f600", None)


def test_every_gateway_key_but_the_identities_has_an_environment_variable(tmp_path: Path) -> None:
    env = {
        "DITTO_GATEWAY_MAX_IN_FLIGHT": "7",
        "DITTO_GATEWAY_HEADER_TIMEOUT_S": "2.5",
        "DITTO_GATEWAY_CORS_ORIGINS": "https://a,https://b",
        "DITTO_GATEWAY_TOKENS": "x",
    }
    raw = _with_env({"maxInFlight": 3, "bodyTimeoutS": 9}, env)
    settings = GatewaySettings.model_validate(raw)
    assert settings.max_in_flight == 7 and settings.header_timeout_s == 2.5
    assert settings.body_timeout_s == 9 and settings.tokens == ()
    assert settings.cors_origins == ("https://a", "https://b")
    path = tmp_path / "ditto.yaml"
    path.write_text("gateway: {maxHeaders: 20}\n", encoding="utf-8")
    assert load_gateway_settings(path).max_headers == 20
