"""Secret-shaped text: credentials, keys, tokens, card/bank/ID numbers, phone numbers.

The ``write`` and ``update`` tasks never store anything secret-shaped (issue 25: the
offline model marked a password as a durable preference every time). :func:`find_secrets`
reports *kinds* only — never the matched text, so a decision, a log line or an artifact
that carries its result leaks nothing.

Kinds and shapes (checked on the whole text; checksums where the format has one):

=================  ==========================================================================
``credential``     "password/passcode/PIN/Passwort/Kennwort/密码/mot de passe/contraseña/
                   secret/token/api key … is/:/=/ist/是 <value>"; ``Bearer <token>``; a URL
                   with ``user:password@``
``private_key``    a PEM ``-----BEGIN … PRIVATE KEY-----`` block
``api_key``        provider key prefixes: ``sk-`` (OpenAI, Anthropic ``sk-ant-``), ``AKIA``/
                   ``ASIA`` (AWS), ``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_`` (GitHub),
                   ``glpat-`` (GitLab), ``xox[abprs]-`` (Slack), ``AIza`` (Google), ``hf_``
                   (Hugging Face), ``pk_/sk_/rk_live_`` (Stripe)
``jwt``            ``eyJ….eyJ….…`` (RFC 7519 compact serialization)
``hex_run``        32+ hex digits in a row (hashes, keys)
``base64_run``     32+ base64/base64url characters mixing upper, lower and digits
``card_number``    13–19 digits (spaces/dashes allowed) passing the Luhn check (ISO/IEC 7812)
``iban``           country code + 2 check digits + 11–30 alphanumerics passing mod-97
                   (ISO 13616)
``national_id``    US SSN ``AAA-GG-SSSS`` (area not 000/666/9xx); UK National Insurance
                   number (``QQ 12 34 56 C``); PRC resident ID (18 characters, ISO 7064
                   MOD 11-2 check)
``phone_number``   a ``+``/digit run of 9–15 digits with spaces, dots, dashes, brackets
``email_address``  ``local@domain.tld``
``redacted``       a span :func:`redact` replaced (``[redacted:<kind>]``): text redacted
                   before it was written stays secret-shaped, so a task resumed from it
                   decides as it did on the original (issue 35 item 2)
=================  ==========================================================================

:func:`secret_spans` finds where those shapes are and :func:`redact` replaces each with
``[redacted:<kind>]`` (idempotent); :func:`redact_json` does so in every string of a JSON
value. The tasks redact everything they write — ``request.json``, checkpoints, the
artifact, progress lines — after quotes were checked against the original text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["SECRET_KINDS", "find_secrets", "redact", "redact_json", "secret_spans"]

SECRET_KINDS = (
    "credential",
    "private_key",
    "api_key",
    "jwt",
    "hex_run",
    "base64_run",
    "card_number",
    "iban",
    "national_id",
    "phone_number",
    "email_address",
    "redacted",
)
"""Every kind :func:`find_secrets` can report, in the order it reports them."""

_CREDENTIAL = re.compile(
    r"(?:(?<![A-Za-z])(?:pass(?:word|wd|code|phrase)?|pwd|pin|passwort|kennwort|"
    r"mot\s+de\s+passe|contraseña|clave|secret|token|api[\s_-]?key|access[\s_-]?key|"
    r"private[\s_-]?key|zugangsdaten)(?![A-Za-z])|密码|口令|密钥)"
    r"(?:[^\S\n]+[^\s:=：]+){0,3}?(?:\s*[:=：是为]|\s+(?:is|ist|est|es|lautet)\b)\s*\S",
    re.IGNORECASE,
)
_CREDENTIAL_SHAPES = re.compile(
    r"\bBearer\s+[A-Za-z0-9._~+/-]{12,}"
    r"|(?<![A-Za-z0-9+.-])[a-z][a-z0-9+.-]{0,30}://[^\s/:@]{1,256}:[^\s/@]{1,256}@",
    re.IGNORECASE,
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_API_KEY = re.compile(
    r"(?<![\w-])(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}|"
    r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}|"
    r"xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,}|"
    r"[psr]k_(?:live|test)_[A-Za-z0-9]{16,})"
)
_JWT = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"
)
_HEX_RUN = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{32,}(?![0-9A-Fa-f])")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}")
_DIGIT_RUN = re.compile(r"(?<![\w+-])\+?\d[\d \-.()/]{6,}\d(?![\w-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_SSN = re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])")
_UK_NINO = re.compile(
    r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
)
_PRC_ID = re.compile(r"(?<!\d)\d{17}[\dXx](?![\dA-Za-z])")
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}"
    r"\.[A-Za-z]{2,24}(?![A-Za-z])"
)


_REDACTED = re.compile(r"\[redacted:[a-z_]+\]")
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*)", re.S
)


def luhn_valid(digits: str) -> bool:
    """ISO/IEC 7812 Luhn check of a string of digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_valid(text: str) -> bool:
    compact = text.replace(" ", "")
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


def _prc_id_valid(text: str) -> bool:
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    total = sum(int(d) * w for d, w in zip(text[:17], weights, strict=True))
    return "10X98765432"[total % 11] == text[17].upper()


def _national_id(text: str) -> bool:
    if _SSN.search(text) or _UK_NINO.search(text):
        return True
    return any(_prc_id_valid(m.group()) for m in _PRC_ID.finditer(text))


def _digit_kinds(text: str) -> set[str]:
    kinds: set[str] = set()
    for match in _DIGIT_RUN.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and luhn_valid(digits) and "/" not in match.group():
            kinds.add("card_number")
        elif 9 <= len(digits) <= 15 and not _looks_like_date_or_version(match.group()):
            kinds.add("phone_number")
    return kinds


def _looks_like_date_or_version(run: str) -> bool:
    return bool(re.fullmatch(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}(?:[ T]\d{1,2}[:.]\d{2})?", run))


def _b64_secret(text: str) -> bool:
    for match in _B64_RUN.finditer(text):
        run = match.group()
        if any(c.isupper() for c in run) and any(c.islower() for c in run):
            if sum(c.isdigit() for c in run) >= 2:
                return True
    return False


_CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    (
        "credential",
        lambda t: _CREDENTIAL.search(t) is not None or _CREDENTIAL_SHAPES.search(t) is not None,
    ),
    ("private_key", lambda t: _PRIVATE_KEY.search(t) is not None),
    ("api_key", lambda t: _API_KEY.search(t) is not None),
    ("jwt", lambda t: _JWT.search(t) is not None),
    ("hex_run", lambda t: _HEX_RUN.search(t) is not None),
    ("base64_run", _b64_secret),
    ("iban", lambda t: any(_iban_valid(m.group()) for m in _IBAN.finditer(t))),
    (
        "national_id",
        _national_id,
    ),
    ("email_address", lambda t: _EMAIL.search(t) is not None),
    ("redacted", lambda t: _REDACTED.search(t) is not None),
)


def find_secrets(text: str) -> list[str]:
    """The kinds of secret-shaped text in ``text`` (never the text itself).

    Args:
        text: any text (a quote, a value, a whole message).

    Returns:
        ``list[str]`` of distinct kinds from :data:`SECRET_KINDS`, in that order; empty
        when nothing secret-shaped was found.
    """
    found = {kind for kind, check in _CHECKS if check(text)}
    found |= _digit_kinds(text)
    if "national_id" in found or "iban" in found:
        found.discard("phone_number")  # an ID or IBAN's digits are not also a phone
    return [kind for kind in SECRET_KINDS if kind in found]


Span = tuple[int, int, str]
"""``(start, end, kind)`` of a secret-shaped part of a text."""


def _credential_spans(text: str) -> list[Span]:
    spans: list[Span] = []
    for m in _CREDENTIAL.finditer(text):  # the value: from its first character to a space
        end = m.end()
        while end < len(text) and not text[end].isspace():
            end += 1
        spans.append((m.end() - 1, end, "credential"))
    spans += [(m.start(), m.end(), "credential") for m in _CREDENTIAL_SHAPES.finditer(text)]
    return spans


def _checked_spans(text: str) -> list[Span]:
    spans = [(m.start(), m.end(), "iban") for m in _IBAN.finditer(text) if _iban_valid(m.group())]
    spans += [(m.start(), m.end(), "national_id") for m in _SSN.finditer(text)]
    spans += [(m.start(), m.end(), "national_id") for m in _UK_NINO.finditer(text)]
    spans += [(m.start(), m.end(), "national_id") for m in _PRC_ID.finditer(text)
              if _prc_id_valid(m.group())]  # fmt: skip
    for m in _DIGIT_RUN.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and luhn_valid(digits) and "/" not in m.group():
            spans.append((m.start(), m.end(), "card_number"))
        elif 9 <= len(digits) <= 15 and not _looks_like_date_or_version(m.group()):
            spans.append((m.start(), m.end(), "phone_number"))
    for m in _B64_RUN.finditer(text):
        run = m.group()
        if any(c.isupper() for c in run) and any(c.islower() for c in run):
            if sum(c.isdigit() for c in run) >= 2:
                spans.append((m.start(), m.end(), "base64_run"))
    return spans


def secret_spans(text: str) -> list[Span]:
    """Where the shapes of :func:`find_secrets` are in ``text``: sorted, merged spans.

    Returns:
        ``[(start, end, kind)]``, non-overlapping, in text order; overlapping finds are
        merged under the first one's kind. Already redacted markers are not reported.
    """
    spans = _credential_spans(text) + _checked_spans(text)
    for kind, pattern in (
        ("private_key", _PRIVATE_KEY_BLOCK), ("api_key", _API_KEY), ("jwt", _JWT),
        ("hex_run", _HEX_RUN), ("email_address", _EMAIL),
    ):  # fmt: skip
        spans += [(m.start(), m.end(), kind) for m in pattern.finditer(text)]
    markers = [(m.start(), m.end()) for m in _REDACTED.finditer(text)]
    merged: list[Span] = []
    for start, end, kind in sorted(spans):
        if any(a <= start and end <= b for a, b in markers):
            continue
        if merged and start < merged[-1][1]:
            first = merged[-1]
            merged[-1] = (first[0], max(first[1], end), first[2])
        else:
            merged.append((start, end, kind))
    return merged


def redact(text: str, keep: frozenset[str] = frozenset()) -> str:
    """``text`` with every :func:`secret_spans` span replaced by ``[redacted:<kind>]``.

    Args:
        text: any text.
        keep: exact spans to leave (the store's own record ids, which a 32-hex-digit
            ``hex_run`` would otherwise take).

    Idempotent (``redact(redact(t)) == redact(t)``); :func:`find_secrets` still reports
    the result (kind ``redacted``), so a decision made on it equals the one made on the
    original.
    """
    out: list[str] = []
    at = 0
    for start, end, kind in secret_spans(text):
        if text[start:end] in keep:
            continue
        out.append(text[at:start])
        out.append(f"[redacted:{kind}]")
        at = end
    out.append(text[at:])
    return "".join(out)


_ID_KEYS = frozenset({"id", "memoryId"})
_STORE_ID = re.compile(r"[0-9a-f]{32}|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")


def _record_ids(value: Any, found: set[str]) -> set[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in _ID_KEYS and isinstance(v, str) and _STORE_ID.fullmatch(v):
                found.add(v)
            _record_ids(v, found)
    elif isinstance(value, list | tuple):
        for v in value:
            _record_ids(v, found)
    return found


def redact_json(value: Any, keep: frozenset[str] | None = None) -> Any:
    """A copy of JSON ``value`` with :func:`redact` applied to every string (keys too).

    Record ids (uuid-shaped strings under an ``id`` / ``memoryId`` key anywhere in
    ``value``; the store makes them) are kept wherever they appear, e.g. in a message's
    citation ``(memory <id> v1)``; ``keep`` replaces that set when given.
    """
    ids = frozenset(_record_ids(value, set())) if keep is None else keep
    if isinstance(value, str):
        return redact(value, ids)
    if isinstance(value, dict):
        return {redact(str(k), ids): redact_json(v, ids) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v, ids) for v in value]
    return value
