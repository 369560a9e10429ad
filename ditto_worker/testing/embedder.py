"""``HashingEmbedder``: a deterministic, offline embedding provider for unit tests.

Feature hashing (Weinberger et al., 2009): each lower-cased word adds a signed 1.0 at a
bucket chosen by a keyed BLAKE2b hash; the sum is L2-normalized. Texts sharing words are
close (cosine > 0), texts sharing none are near-orthogonal, and the same text always gets
the same vector on every machine. A text without words embeds to a fixed unit vector.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from typing import Final

from ditto_worker.memory.ports import EmbeddingIdentity, l2_normalize

__all__ = ["HashingEmbedder"]

_WORDS: Final = re.compile(r"\w+")


class HashingEmbedder:
    """Deterministic ``EmbeddingProvider``: identity ``testing/hashing@seed=<seed>``.

    Args:
        dims: vector length (default 64).
        seed: hash key; another seed is another identity (and another vector space).

    Attributes:
        calls: the batches received, in order (each a list of texts), for assertions.
    """

    def __init__(self, dims: int = 64, seed: int = 0) -> None:
        self._identity = EmbeddingIdentity("testing", "hashing", f"seed={seed}", dims, "l2")
        self._key = str(seed).encode()
        self._lock = threading.Lock()
        self.calls: list[list[str]] = []

    @property
    def texts(self) -> list[str]:
        """Every text embedded so far, in order (``calls`` flattened)."""
        with self._lock:
            return [text for batch in self.calls for text in batch]

    @property
    def identity(self) -> EmbeddingIdentity:
        """``testing/hashing`` with ``dims`` dims, L2-normalized."""
        return self._identity

    def _vector(self, text: str) -> list[float]:
        dims = self._identity.dims
        vector = [0.0] * dims
        for word in _WORDS.findall(text.lower()) or [""]:
            digest = hashlib.blake2b(word.encode(), key=self._key, digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vector[value % dims] += 1.0 if (value >> 63) & 1 else -1.0
        if not any(vector):
            vector[0] = 1.0
        return l2_normalize(vector)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors of ``dims`` floats, one per text, in order."""
        with self._lock:
            self.calls.append(list(texts))
        return [self._vector(text) for text in texts]
