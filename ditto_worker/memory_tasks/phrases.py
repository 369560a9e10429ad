"""Phrase matching for the admission rules: plain phrase lists compiled to one regex.

A phrase is written as a person would type it (``"just for this"``, ``"auf Deutsch"``,
``"这次"``); :func:`phrase_pattern` turns a list of them into one case-insensitive
pattern:

* a phrase that starts (ends) with a letter or digit of a spaced script must start (end)
  at a word boundary — ``German`` does not match inside ``Germany``; CJK phrases match as
  plain substrings (Chinese and Japanese have no spaces between words);
* a trailing ``*`` allows any word characters after it (``respon*`` matches
  ``responses``);
* a space matches any run of whitespace; an apostrophe matches ``'`` or ``’``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["phrase_pattern"]

_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def _one(phrase: str) -> str:
    wildcard = phrase.endswith("*")
    core = phrase[:-1] if wildcard else phrase
    body = re.escape(core).replace(r"\ ", r"\s+").replace("'", "['’]")
    if wildcard:
        body += r"\w*"
    if core[:1].isalnum() and not _CJK_CHAR.match(core[:1]):
        body = r"(?<!\w)" + body
    if not wildcard and core[-1:].isalnum() and not _CJK_CHAR.match(core[-1:]):
        body += r"(?!\w)"
    return body


def phrase_pattern(phrases: Iterable[str]) -> re.Pattern[str]:
    """One case-insensitive pattern matching any of ``phrases`` (longest first).

    Raises:
        ValueError: ``phrases`` is empty or holds an empty phrase (a programming error in
            a policy or rule table, never user input).
    """
    items = sorted({p.strip() for p in phrases}, key=len, reverse=True)
    if not items or not all(items):
        raise ValueError("a phrase list must hold non-empty phrases")
    return re.compile("|".join(_one(p) for p in items), re.IGNORECASE)
