"""The packaged model file: found through package metadata, joined once, sha256-checked
before every use; a mismatch is refused (docs/runtime.md "INFER worker", provenance)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ditto_worker.infer import local
from ditto_worker.infer.local import LocalModelError, packaged_model_path


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    parts = []
    for i, data in enumerate((b"GGUF-part-one;", b"part-two;", b"part-three")):
        path = tmp_path / "parts" / f"part{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        parts.append(path)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    monkeypatch.setattr(local, "_part_files", lambda: parts)
    monkeypatch.setattr(local, "MODEL_SHA256", digest)
    return parts


def test_the_parts_are_joined_once_and_checked(fake_parts: list[Path], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = packaged_model_path(cache)
    assert path.read_bytes() == b"GGUF-part-one;part-two;part-three"
    assert path.parent == cache and path.name.endswith(".gguf")
    fake_parts[0].write_bytes(b"changed")  # the cached copy is used (it still verifies)
    assert packaged_model_path(cache).read_bytes() == b"GGUF-part-one;part-two;part-three"


def test_a_damaged_cached_copy_is_joined_again(fake_parts: list[Path], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = packaged_model_path(cache)
    path.write_bytes(b"tampered")
    assert packaged_model_path(cache).read_bytes() == b"GGUF-part-one;part-two;part-three"


def test_parts_that_do_not_match_the_pinned_sha256_are_refused(
    fake_parts: list[Path], tmp_path: Path
) -> None:
    fake_parts[1].write_bytes(b"evil")
    cache = tmp_path / "cache"
    with pytest.raises(LocalModelError, match="sha256") as info:
        packaged_model_path(cache)
    assert "not using them" in str(info.value)
    assert list(cache.iterdir()) == []  # neither the file nor a temporary copy is kept


def test_a_missing_part_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "MODEL_PACKAGES", (("ditto-no-such-part", "x.bin"),))
    with pytest.raises(LocalModelError, match=r'pip install "ditto-worker\[infer\]"'):
        local._part_files()


def test_the_installed_parts_are_the_pinned_ones() -> None:
    """The infer extra (in dev) installs all six parts: 491,400,064 bytes in all."""
    parts = local._part_files()
    assert len(parts) == 6
    assert sum(p.stat().st_size for p in parts) == 491_400_064
    assert parts[0].read_bytes()[:4] == b"GGUF"


def test_a_model_path_of_your_own_is_used_as_is(tmp_path: Path) -> None:
    from ditto_worker.config.infer import LocalModelSettings

    own = tmp_path / "own.gguf"
    own.write_bytes(b"GGUF")
    assert local._resolve_model(LocalModelSettings(model_path=str(own))) == own
    with pytest.raises(LocalModelError, match="is not a file"):
        local._resolve_model(LocalModelSettings(model_path=str(tmp_path / "absent")))


def test_the_default_threads_suit_a_shared_machine() -> None:
    # issue 25: threads 0 = half the usable cores, at least 1 (1 on a 2-core machine)
    assert [local.default_threads(n) for n in (1, 2, 3, 4, 8, 16)] == [1, 1, 1, 2, 4, 8]
    assert 1 <= local.default_threads() <= max(1, (os.cpu_count() or 1) // 2)
    pytest.importorskip("xllamacpp")
    from ditto_worker.infer import LocalModelSettings

    chosen = local._params(Path("m.gguf"), LocalModelSettings(threads=0), "127.0.0.1", 0)
    assert chosen.cpuparams.n_threads == local.default_threads()
    pinned = local._params(Path("m.gguf"), LocalModelSettings(threads=3), "127.0.0.1", 0)
    assert (pinned.cpuparams.n_threads, pinned.cpuparams_batch.n_threads) == (3, 3)
