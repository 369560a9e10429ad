"""Keyset cursors that cannot be forged, altered or moved (SPEC.md MEM-PY-5, MEM-QUERY-5).

A QUERY page's ``nextCursor`` carries the query's fingerprint, the namespace it was issued
in, and the last row's typed sort values and sequence number. Every store plugin makes and
reads them with :func:`encode_cursor` / :func:`decode_cursor`, with a secret of its own and
the namespace string it confines the call to (issue 23 item 4):

* the secret is made once per store (:func:`new_cursor_secret`, 32 random bytes) and kept
  where the store keeps its settings — SQLite and PostgreSQL: the row
  :data:`CURSOR_SECRET_SETTING` of their ``store_settings`` table, so every worker process
  on the same database shares it; the in-memory store: one per instance; a store without
  SQL keeps it in whatever holds its own settings (e.g. a Qdrant settings point);
* a cursor is ``<payload>.<tag>``, both unpadded base64url: the payload is compact JSON
  ``{"v": 3, "f": fingerprint, "n": namespace_tag, "k": [[rank, value], …], "s": seq}``
  and the tag its HMAC-SHA256 under the secret, cut to 128 bits (RFC 2104; truncation as
  RFC 4868 §2.6);
* ``namespace_tag`` binds the cursor to the store's namespace string (the one it compares
  records with: ``<tenant>:<user>:memory``, ``""`` unscoped, and any space added later,
  e.g. ``…:task:<taskId>``): 16 hex characters of HMAC-SHA256 under the secret of
  ``b"namespace\0" + namespace`` — keyed, so a cursor does not reveal which tenant or
  user it belongs to. A cursor presented in another namespace is ``INVALID_CURSOR``,
  never a page of that namespace starting after some row of it;
* decoding is strict and checks in this order, each failure ``INVALID_CURSOR``: length
  (at most :data:`MAX_CURSOR_CHARS`), alphabet (``A-Z a-z 0-9 - _`` and one ``.``; a
  space, ``!`` or padding is refused, not skipped), canonical base64 (re-encoding gives
  the same text), the tag (constant-time compare) — so nothing a client made up is ever
  parsed as JSON — then the JSON itself: depth and size, version, fingerprint, namespace,
  and every field's type and range (``s`` a 64-bit sequence ``>= 0``; numbers 64-bit integers or
  finite floats; ranks 0-5 with the value their rank allows).

Cursors issued before signed cursors (version 1, no tag) or before namespace-bound ones
(version 2) fail with ``INVALID_CURSOR``: a client paging across the upgrade starts its
listing again. A cursor stays valid while its
store keeps its secret (deleting the ``store_settings`` row invalidates every cursor).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from ditto_worker.contracts import OrderBy
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "CURSOR_SECRET_SETTING",
    "MAX_CURSOR_CHARS",
    "Cursor",
    "SortValue",
    "decode_cursor",
    "encode_cursor",
    "new_cursor_secret",
    "query_fingerprint",
]

SortValue: TypeAlias = tuple[int, int | float | str]
"""A typed sort value ``(rank, value)``: rank 0 missing/null, 1 number, 2 string, 3 object,
4 array, 5 boolean; value is the number, the string, ``0``/``1`` for booleans, else ``0``."""

CURSOR_SECRET_SETTING: Final = "cursor_secret"
"""``store_settings.name`` of a store's cursor secret (the value: :func:`new_cursor_secret`)."""

MAX_CURSOR_CHARS: Final = 1 << 20
"""Longest cursor accepted (and made): 1,048,576 characters. Only a sort value of about
750 KB (a long string in an ``orderBy`` field) comes near it."""

_VERSION: Final = 3
_NS_DOMAIN: Final = b"namespace\0"
_TAG_BYTES: Final = 16
_INT64: Final = 1 << 63
_MAX_TERMS: Final = 64
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", re.ASCII)


@dataclass(frozen=True)
class Cursor:
    """A decoded keyset cursor: the last row's sort values (one per term) and sequence."""

    values: tuple[SortValue, ...]
    seq: int


def new_cursor_secret() -> str:
    """A fresh cursor secret: 32 random bytes (``secrets``), as 64 hex characters."""
    import secrets  # here, not at import: hashlib/hmac load OpenSSL (~4 ms)

    return secrets.token_hex(32)


def query_fingerprint(
    filter: Mapping[str, Any] | None, order_by: Sequence[OrderBy | Mapping[str, Any]] | None
) -> str:
    """A short hex digest of (filter, orderBy) that a cursor is bound to (16 hex chars)."""
    terms = [
        (t.field, t.direction) if isinstance(t, OrderBy) else (t.get("field"), t.get("direction"))
        for t in order_by or ()
    ]
    text = json.dumps([filter, terms], sort_keys=True, separators=(",", ":"), default=repr)
    import hashlib  # here, not at import: it loads OpenSSL (~4 ms)

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _key(secret: str | bytes) -> bytes:
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if len(key) < 16:
        raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "the store's cursor secret is too short")
    return key


def _tag(key: bytes, payload: bytes) -> bytes:
    import hashlib  # here, not at import: hashlib/hmac load OpenSSL (~4 ms)
    import hmac

    return hmac.new(key, payload, hashlib.sha256).digest()[:_TAG_BYTES]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _namespace_tag(key: bytes, namespace: str) -> str:
    if not isinstance(namespace, str):
        raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "a cursor's namespace must be a string")
    return _tag(key, _NS_DOMAIN + namespace.encode("utf-8", "surrogatepass"))[:8].hex()


def encode_cursor(
    fingerprint: str,
    values: Sequence[SortValue],
    seq: int,
    secret: str | bytes,
    *,
    namespace: str,
) -> str:
    """Make the signed cursor of a page's last row.

    Args:
        fingerprint: :func:`query_fingerprint` of the request's filter and orderBy.
        values: the row's typed sort values, one per orderBy term.
        seq: the row's store sequence number (``>= 0``).
        secret: the store's cursor secret (:func:`new_cursor_secret`; at least 16 bytes).
        namespace: the namespace string the store confined this call to — the one it
            compares records with (:func:`ditto_worker.memory.scope.namespace_of`), so a
            space added later binds the cursor too. ``""`` for unscoped calls.

    Returns:
        ``<payload>.<tag>`` (base64url, no padding), at most :data:`MAX_CURSOR_CHARS`.

    Raises:
        MemoryError: ``UNSUPPORTED_ORDER_BY`` when the sort values are too long for a
            cursor (a sort value of about 750 KB); ``MEMORY_BACKEND_ERROR`` for a secret
            shorter than 16 bytes or a namespace that is not a string.
    """
    key = _key(secret)
    payload = {
        "v": _VERSION,
        "f": fingerprint,
        "n": _namespace_tag(key, namespace),
        "k": [list(v) for v in values],
        "s": seq,
    }
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    token = f"{_b64(raw)}.{_b64(_tag(key, raw))}"
    if len(token) > MAX_CURSOR_CHARS:
        raise MemoryError(
            ErrorCode.UNSUPPORTED_ORDER_BY,
            "the last record's sort values are too long for a cursor; sort by a shorter field",
        )
    return token


def _bad(reason: str) -> MemoryError:
    return MemoryError(ErrorCode.INVALID_CURSOR, f"invalid cursor: {reason}")


def _strict_b64(text: str) -> bytes:
    """Decode unpadded base64url, refusing anything but its canonical form."""
    if len(text) % 4 == 1:
        raise _bad("malformed")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise _bad("malformed") from exc
    if _b64(raw) != text:  # unused low bits set: another spelling of the same bytes
        raise _bad("malformed")
    return raw


def decode_cursor(
    token: str, fingerprint: str, n_terms: int, secret: str | bytes, *, namespace: str
) -> Cursor:
    """Check and decode a cursor made by :func:`encode_cursor` with the same secret.

    Args:
        token: the ``cursor`` of the request.
        fingerprint: :func:`query_fingerprint` of this request's filter and orderBy.
        n_terms: the number of orderBy terms of this request.
        secret: the store's cursor secret.
        namespace: the namespace string the store confines this call to (as for
            :func:`encode_cursor`).

    Raises:
        MemoryError: ``INVALID_CURSOR`` when it is too long, not strictly
            ``<base64url>.<base64url>``, not signed with this store's secret (forged,
            altered, or made before cursors were signed), of another version (made before
            cursors were bound to their namespace), made for another filter/orderBy,
            issued in another namespace (another scope or space), or holding a field of
            the wrong type or range.
    """
    if not isinstance(token, str) or len(token) > MAX_CURSOR_CHARS:
        raise _bad("malformed or too long")
    if _TOKEN.fullmatch(token) is None:
        raise _bad("malformed (not a cursor of this store)")
    body, tag = token.split(".")
    raw, signature = _strict_b64(body), _strict_b64(tag)
    import hmac  # here, not at import: it loads OpenSSL (~4 ms)

    key = _key(secret)
    if not hmac.compare_digest(signature, _tag(key, raw)):
        raise _bad("not issued by this store, altered, or made before cursors were signed")
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad("malformed") from exc
    return _checked(payload, fingerprint, _namespace_tag(key, namespace), n_terms)


def _checked(payload: Any, fingerprint: str, namespace_tag: str, n_terms: int) -> Cursor:
    if not isinstance(payload, dict):
        raise _bad("malformed")
    if payload.get("v") != _VERSION or type(payload["v"]) is not int:
        raise _bad("of another version; start the listing again without a cursor")
    if set(payload) != {"v", "f", "n", "k", "s"}:
        raise _bad("malformed")
    if payload["f"] != fingerprint:
        raise _bad("made for another filter or orderBy")
    if payload["n"] != namespace_tag:
        raise _bad("issued in another scope or space")
    seq, keys = payload["s"], payload["k"]
    if type(seq) is not int or not 0 <= seq < _INT64:
        raise _bad("malformed")
    if not isinstance(keys, list) or len(keys) != n_terms or n_terms > _MAX_TERMS:
        raise _bad("malformed")
    return Cursor(tuple(_sort_value(item) for item in keys), seq)


def _sort_value(item: Any) -> SortValue:
    if not isinstance(item, list) or len(item) != 2 or type(item[0]) is not int:
        raise _bad("malformed")
    rank, value = item
    kind = type(value)
    valid = (
        (rank in (0, 3, 4) and kind is int and value == 0)
        or (rank == 1 and kind is int and -_INT64 <= value < _INT64)
        or (rank == 1 and kind is float and math.isfinite(value))
        or (rank == 2 and kind is str)
        or (rank == 5 and kind is int and value in (0, 1))
    )
    if not valid:
        raise _bad("malformed")
    return (rank, value)
