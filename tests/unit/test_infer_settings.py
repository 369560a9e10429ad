"""``workers.infer`` + env + ``.env`` (SPEC.md MEM-INF-1): layering, and the key's secrecy."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_worker.errors import ConfigError
from ditto_worker.infer import InferSettings, load_infer_settings


def test_defaults() -> None:
    s = load_infer_settings(None, env={}, dotenv_path=None)
    assert (s.base_url, s.model, s.api_key) == ("", "", None)
    assert (s.max_tokens, s.temperature, s.concurrency) == (512, 0.0, 1)
    assert s.local.auto_start is True and s.local.batch_tokens == 128


def test_yaml_keys_are_camel_case_and_strict() -> None:
    s = load_infer_settings(
        {"baseUrl": "http://h/v1", "maxTokens": 64, "local": {"ctxSize": 2048}},
        env={},
        dotenv_path=None,
    )
    assert (s.base_url, s.max_tokens, s.local.ctx_size) == ("http://h/v1", 64, 2048)
    with pytest.raises(ConfigError, match="bogus"):
        load_infer_settings({"bogus": 1}, env={}, dotenv_path=None)
    with pytest.raises(ConfigError, match="concurrency"):
        load_infer_settings({"concurrency": 0}, env={}, dotenv_path=None)


def test_env_overrides_yaml_and_dotenv(tmp_path: Path) -> None:
    # MEM-INF-1
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "DITTO_WORKER_INFER_BASE_URL=http://dotenv/v1\n"
        "DITTO_WORKER_INFER_MODEL=from-dotenv\n"
        "DITTO_WORKER_INFER_API_KEY=sk-dotenv\n"
        "OTHER_SECRET=never-read\n"
    )
    s = load_infer_settings({"baseUrl": "http://yaml/v1", "model": "y"}, {}, dotenv)
    assert (s.base_url, s.model) == ("http://dotenv/v1", "from-dotenv")
    assert s.api_key is not None and s.api_key.get_secret_value() == "sk-dotenv"
    env = {"DITTO_WORKER_INFER_MODEL": "from-env", "DITTO_WORKER_INFER_API_KEY": "sk-env"}
    s = load_infer_settings({"baseUrl": "http://yaml/v1"}, env, dotenv)
    assert (s.base_url, s.model) == ("http://dotenv/v1", "from-env")
    assert s.api_key is not None and s.api_key.get_secret_value() == "sk-env"


def test_a_missing_dotenv_is_fine(tmp_path: Path) -> None:
    s = load_infer_settings(None, env={}, dotenv_path=tmp_path / "absent")
    assert s.base_url == ""


def test_the_key_is_never_read_from_yaml() -> None:
    # MEM-INF-1
    with pytest.raises(ConfigError) as info:
        load_infer_settings({"apiKey": "sk-in-yaml"}, env={}, dotenv_path=None)
    assert "DITTO_WORKER_INFER_API_KEY" in str(info.value)
    assert "sk-in-yaml" not in str(info.value)


def test_the_key_never_shows() -> None:
    s = load_infer_settings(None, env={"DITTO_WORKER_INFER_API_KEY": "sk-hidden"}, dotenv_path=None)
    for text in (repr(s), str(s), s.model_dump_json(), str(s.model_dump())):
        assert "sk-hidden" not in text
    again = load_infer_settings(s, env={}, dotenv_path=None)  # validated settings pass through
    assert again.api_key is not None and again.api_key.get_secret_value() == "sk-hidden"


def test_a_bad_value_is_named_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as info:
        load_infer_settings({"temperature": "sk-looks-secret"}, env={}, dotenv_path=None)
    assert "temperature" in str(info.value)
    assert "sk-looks-secret" not in str(info.value)


def test_settings_are_frozen() -> None:
    s = InferSettings()
    with pytest.raises(ValueError):
        s.base_url = "x"  # type: ignore[misc]


def test_workers_infer_in_ditto_yaml() -> None:
    from ditto_worker.config import load_runtime_config, load_runtime_config_file

    repo = Path(__file__).resolve().parents[2]
    reference = load_runtime_config_file(repo / "ditto.yaml", env={}).infer_worker
    assert reference == InferSettings()  # ditto.yaml documents every key with its default
    config = load_runtime_config(
        {"workers": {"infer": {"maxTokens": 64}}},
        env={"DITTO_WORKER_INFER_BASE_URL": "http://e/v1", "DITTO_WORKER_INFER_API_KEY": "k1"},
    )
    assert (config.infer_worker.base_url, config.infer_worker.max_tokens) == ("http://e/v1", 64)
    assert "k1" not in repr(config) and "k1" not in config.model_dump_json()
    with pytest.raises(ConfigError, match="DITTO_WORKER_INFER_API_KEY") as info:
        load_runtime_config({"workers": {"infer": {"apiKey": "sk-yaml"}}}, env={})
    assert "sk-yaml" not in str(info.value)
