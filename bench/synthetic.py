"""Synthetic vectors for the store benches: clustered, perturbed, deterministic, no model.

Embedding a million texts with a real model takes over an hour on two cores, and the
``HashingEmbedder`` gives sparse bag-of-words vectors (a few dozen non-zero dims of 384)
that say little about an ANN index. :class:`SyntheticEmbedder` maps each text to one of
``clusters`` random unit centres (by a hash of the text) plus a perturbation drawn from
two banks of random vectors (by other bits of the same hash), L2-normalised: dense
vectors, a neighbourhood structure (about ``n / clusters`` records around each centre),
the same vector for the same text in every run and process, ~1 µs of hashing per text
plus one NumPy gather per batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ditto_worker.memory.ports import EmbeddingIdentity

BANK = 8192
"""Rows of each perturbation bank (two banks: 67M distinct perturbations)."""


class SyntheticEmbedder:
    """An ``EmbeddingProvider`` of clustered random unit vectors (identity ``bench/synthetic``).

    Args:
        dims: vector length (384: all-MiniLM-L6-v2's).
        seed: fixes the centres and banks; another seed is another identity.
        clusters: number of centres.
        spread: scale of the perturbation (each bank row has norm ~1), so a record's
            cosine to its centre is about ``1 / sqrt(1 + 2 * spread**2)`` (0.82 at 0.5).
    """

    def __init__(
        self, dims: int = 384, seed: int = 0, clusters: int = 1000, spread: float = 0.5
    ) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((clusters, dims)).astype(np.float32)
        self._centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        scale = np.float32(spread / np.sqrt(dims))
        self._banks = rng.standard_normal((2, BANK, dims)).astype(np.float32) * scale
        self._clusters = clusters
        revision = f"seed={seed},clusters={clusters},spread={spread}"
        self._identity = EmbeddingIdentity("bench", "synthetic", revision, dims, "l2")

    @property
    def identity(self) -> EmbeddingIdentity:
        """``bench/synthetic`` with the seed, clusters and spread as revision."""
        return self._identity

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors of ``dims`` floats, one per text, in order."""
        hashes = np.array(
            [
                int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
                for t in texts
            ],
            dtype=np.uint64,
        )
        centre = (hashes % np.uint64(self._clusters)).astype(np.int64)
        first = ((hashes >> np.uint64(20)) % np.uint64(BANK)).astype(np.int64)
        second = ((hashes >> np.uint64(40)) % np.uint64(BANK)).astype(np.int64)
        vectors = self._centres[centre] + self._banks[0][first] + self._banks[1][second]
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        out: list[list[float]] = vectors.tolist()
        return out
