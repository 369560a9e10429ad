"""The embedding device you can choose (issue 28 item 6) and the provider's vectorised
check: ``workers.retrieval.device`` / ``DITTO_WORKER_RETRIEVAL_DEVICE`` reaches every local
embedder the process builds, and the provider's vectors are the model's own."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ditto_worker.config import load_runtime_config
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.retrieval.embed import LocalEmbeddingProvider, check_array, resolve_device
from ditto_worker.runtime.registry import build_store

pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")

TEXTS = [f"memory number {i}: the user prefers {w} replies" for i, w in
         enumerate(["short", "long", "German", "formal", "casual"] * 40)]  # fmt: skip


@pytest.fixture(scope="module")
def provider() -> LocalEmbeddingProvider:
    return LocalEmbeddingProvider()


def test_the_providers_vectors_are_the_models_own(provider: LocalEmbeddingProvider) -> None:
    raw = provider.model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False)  # fmt: skip
    ours = np.asarray(provider.embed(TEXTS))
    cosines = (raw * ours).sum(axis=1) / np.linalg.norm(raw, axis=1) / np.linalg.norm(ours, axis=1)
    assert ours.shape == (len(TEXTS), provider.identity.dims)
    assert float(cosines.min()) >= 1 - 1e-6


def test_the_vectorised_check_refuses_what_the_element_check_refused() -> None:
    good = np.ones((3, 4), dtype=np.float32)
    check_array(good, 3, 4)
    for array, count, dims, words in [
        (good, 2, 4, "expected 2 vectors, got 3"),
        (good, 3, 5, "expected vectors of 5 dims, got 4"),
        (np.array([[1.0, math.nan, 0, 0]] * 3), 3, 4, "non-finite"),
        (np.array([[1.0, math.inf, 0, 0]] * 3), 3, 4, "non-finite"),
    ]:
        with pytest.raises(MemoryError) as caught:
            check_array(array, count, dims)
        assert caught.value.code == ErrorCode.EMBEDDING_MISMATCH and words in str(caught.value)


def test_devices_resolve_and_a_missing_gpu_is_an_error_not_a_fallback() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        for device in ["cuda", "cuda:1"]:
            with pytest.raises(MemoryError) as caught:
                resolve_device(device)
            assert caught.value.code == ErrorCode.EMBEDDING_UNAVAILABLE
            assert "no GPU" in str(caught.value)
    with pytest.raises(MemoryError, match="unknown device"):
        resolve_device("tpu")


def test_the_config_names_the_device_and_refuses_others() -> None:
    assert load_runtime_config(None, env={}).retrieval_worker.device == "cpu"
    set_by_env = load_runtime_config(None, env={"DITTO_WORKER_RETRIEVAL_DEVICE": "auto"})
    assert set_by_env.retrieval_worker.device == "auto"
    with pytest.raises(ConfigError, match="device"):
        load_runtime_config({"workers": {"retrieval": {"device": "gpu"}}}, env={})


def test_the_device_reaches_the_embedder_a_store_plugin_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    original = LocalEmbeddingProvider.__init__

    def spy(self: LocalEmbeddingProvider, *args: Any, **kwargs: Any) -> None:
        seen.append(kwargs.get("device"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(LocalEmbeddingProvider, "__init__", spy)
    config = load_runtime_config(
        {"workers": {"retrieval": {"device": "auto"}},
         "plugins": {"sqlite": {"path": str(tmp_path / "m.sqlite"), "embedding": "local"}}},
        env={},
    )  # fmt: skip
    store = build_store(config, "sqlite", env={})
    try:
        assert seen == ["auto"]
        assert store.embedder.device.startswith("cuda" if torch.cuda.is_available() else "cpu")
    finally:
        store.close()


def test_torch_threads_default_to_half_the_cores_and_reach_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # issue 28 item 5: 2 spinning torch threads on 2 shared cores stalled every query
    from ditto_worker.retrieval.embed import default_torch_threads

    assert [default_torch_threads(n) for n in (1, 2, 3, 8)] == [1, 1, 1, 4]
    assert default_torch_threads() >= 1
    before = torch.get_num_threads()
    try:
        LocalEmbeddingProvider(threads=2)
        assert torch.get_num_threads() == 2
        config = load_runtime_config(
            {"workers": {"retrieval": {"torchThreads": 1}},
             "plugins": {"sqlite": {"path": str(tmp_path / "t.sqlite"), "embedding": "local"}}},
            env={},
        )  # fmt: skip
        store = build_store(config, "sqlite", env={})  # the plugin's embedder: from the config
        store.close()
        assert torch.get_num_threads() == 1
        env_set = load_runtime_config(None, env={"DITTO_WORKER_RETRIEVAL_TORCH_THREADS": "3"})
        assert env_set.retrieval_worker.torch_threads == 3
        assert load_runtime_config(None, env={}).retrieval_worker.torch_threads == 0
        with pytest.raises(ConfigError, match="torchThreads"):
            load_runtime_config({"workers": {"retrieval": {"torchThreads": -1}}}, env={})
    finally:
        torch.set_num_threads(before)
