"""Signed keyset cursors (MEM-PY-5, MEM-QUERY-5; issue 13 item 2, issue 23 item 4):
:mod:`ditto_worker.memory.cursors`.

A cursor is ``<payload>.<tag>`` with an HMAC under the store's secret, bound to the query
and the namespace it was issued in. Anything else — foreign characters, a changed character,
another store's secret, another namespace (scope or space), an unsigned cursor of the old
format, a version-2 cursor made before namespace binding, a payload with out-of-range or
deeply nested fields even when correctly signed — is ``INVALID_CURSOR``, never an
``OverflowError`` / ``RecursionError`` further down. The same cases run through every store
in the conformance suite (``test_cursors_cannot_be_forged_or_altered``,
``test_cursor_is_bound_to_its_namespace``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_worker.contracts import OrderBy
from ditto_worker.errors import MemoryError
from ditto_worker.memory import cursors
from ditto_worker.memory.cursors import (
    MAX_CURSOR_CHARS,
    decode_cursor,
    encode_cursor,
    new_cursor_secret,
    query_fingerprint,
)

SECRET = new_cursor_secret()
FP = query_fingerprint({"n": 1}, [OrderBy(field="n")])
NS = "acme:alice:memory"


def ns_tag(namespace: str = NS, secret: str = SECRET) -> str:
    """The payload's ``n``, computed apart from the module: HMAC of ``namespace\\0<ns>``."""
    raw = b"namespace\0" + namespace.encode()
    return hmac.new(secret.encode(), raw, hashlib.sha256).digest()[:8].hex()


NT = ns_tag()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def signed(payload: bytes | Any, secret: str = SECRET) -> str:
    """A cursor of any payload, correctly signed: what a leaked secret could make."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    tag = hmac.new(secret.encode(), raw, hashlib.sha256).digest()[:16]
    return f"{b64(raw)}.{b64(tag)}"


def invalid(token: str, fingerprint: str = FP, n_terms: int = 1, namespace: str = NS) -> str:
    with pytest.raises(MemoryError) as info:
        decode_cursor(token, fingerprint, n_terms, SECRET, namespace=namespace)
    assert info.value.code == "INVALID_CURSOR"
    return info.value.safe_message


def test_round_trip() -> None:
    values = ((1, 2.5), (2, "é"), (0, 0), (5, 1), (1, -(2**63)), (3, 0), (4, 0))
    token = encode_cursor(FP, values, 42, SECRET, namespace=NS)
    assert re.fullmatch(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", token)
    cursor = decode_cursor(token, FP, len(values), SECRET, namespace=NS)
    assert cursor.values == values and cursor.seq == 42


def test_bound_to_filter_and_order_by() -> None:
    # MEM-PY-5: a cursor made for another filter/orderBy is INVALID_CURSOR
    fp = query_fingerprint({"n": 1}, None)
    token = encode_cursor(fp, (), 1, SECRET, namespace=NS)
    assert query_fingerprint({"n": 2}, None) != fp
    assert query_fingerprint({"n": 1}, [OrderBy(field="n")]) != fp
    assert query_fingerprint({"n": 1}, [{"field": "n", "direction": "asc"}]) == (
        query_fingerprint({"n": 1}, [OrderBy(field="n")])
    )
    for other in (query_fingerprint({"n": 2}, None), query_fingerprint(None, None)):
        assert "another filter" in invalid(token, other, 0)


def test_the_signed_helper_makes_valid_cursors() -> None:
    # so that the "signed but malformed" cases below fail for their own reason only
    cursor = decode_cursor(signed(valid()), FP, 1, SECRET, namespace=NS)
    assert cursor == cursors.Cursor(((1, 5),), 1)


def valid(**fields: Any) -> dict[str, Any]:
    return {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": 1, **fields}


def test_bound_to_namespace() -> None:
    # MEM-QUERY-5, issue 23 item 4: t1's cursor under t2 used to start t2's listing after
    # t2's 9th row; now any other namespace string — scope, unscoped, another space — fails
    token = encode_cursor(FP, ((1, 9),), 9, SECRET, namespace=NS)
    others = ["acme:bob:memory", "", "acme:alice:task:t1", f"{NS} ", NS.upper()]
    for other in others:
        assert "another scope or space" in invalid(token, namespace=other)
    assert decode_cursor(token, FP, 1, SECRET, namespace=NS).seq == 9
    # keyed: the payload names no tenant or user, and another store's tag differs
    payload = base64.urlsafe_b64decode(token.split(".")[0] + "==")
    assert b"acme" not in payload and b"alice" not in payload
    assert json.loads(payload)["n"] == NT != ns_tag(NS, new_cursor_secret())
    # signed with the right secret, but the namespace tag of another scope
    assert "another scope or space" in invalid(signed(valid(n=ns_tag("acme:bob:memory"))))


def test_cursors_before_namespace_binding_fail() -> None:
    # version 2 (signed, no namespace): what every store issued before issue 23
    old = signed({"v": 2, "f": FP, "k": [[1, 5]], "s": 3})
    assert "another version" in invalid(old)


def test_the_issue_cases() -> None:
    token = encode_cursor(FP, ((1, 5),), 7, SECRET, namespace=NS)
    invalid(token + "!")  # used to decode: the base64 decoder skipped the "!"
    invalid(token[:5] + " " + token[5:])
    invalid(token + "=")
    invalid(token + "==")
    # forged with the right fingerprint, unsigned (the old format) or signed elsewhere
    unsigned = b64(json.dumps({"v": 1, "f": FP, "k": [[1, 5]], "s": 10**20}).encode())
    invalid(unsigned)
    for payload in (
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": 10**20},  # OverflowError in a driver before
        {"v": 3, "f": FP, "n": NT, "k": [[1, 10**400]], "s": 1},
        {"v": 3, "f": FP, "n": NT, "k": [[1, 1e308 * 10]], "s": 1},  # Infinity
    ):
        invalid(signed(payload, new_cursor_secret()))  # another store's secret
        invalid(signed(payload))  # even this store's secret: the ranges are checked
    head = b'{"v": 3, "f": "' + FP.encode() + b'", "n": "' + NT.encode() + b'", "k": ['
    huge = head + b"[1, " + b"9" * 5000 + b']], "s": 1}'
    invalid(signed(huge))  # past int's digit limit: ValueError inside json
    deep = b"[" * 100_000 + b"]" * 100_000  # RecursionError in json before
    invalid(signed(deep))
    invalid(signed(head + b"[" * 5000 + b"]"))


def test_made_before_signing_fails() -> None:
    # the version-1 format (no tag): documented, INVALID_CURSOR
    old = b64(json.dumps({"v": 1, "f": FP, "k": [[1, 5]], "s": 3}).encode())
    assert "malformed" in invalid(old)


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(min_value=0),
    char=st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!=+/ é"),
    mode=st.sampled_from(["replace", "insert", "delete"]),
)
def test_any_edit_is_refused(index: int, char: str, mode: str) -> None:
    token = encode_cursor(FP, ((2, "some value"),), 1234, SECRET, namespace=NS)
    i = index % len(token)
    if mode == "replace":
        edited = token[:i] + char + token[i + 1 :]
    elif mode == "insert":
        edited = token[:i] + char + token[i:]
    else:
        edited = token[:i] + token[i + 1 :]
    if edited == token:
        return
    invalid(edited)


def test_non_canonical_base64_is_refused() -> None:
    # same bytes, other spelling: the last character's unused bits set
    token = encode_cursor(FP, ((1, 5),), 7, SECRET, namespace=NS)
    body, tag = token.split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for part, other in ((body, tag), (tag, body)):
        if len(part) % 4 in (2, 3):
            last = alphabet.index(part[-1])
            variant = part[:-1] + alphabet[last | 1 if len(part) % 4 == 3 else last | 0xF]
            if variant != part:
                edited = f"{variant}.{other}" if part is body else f"{other}.{variant}"
                invalid(edited)


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        {},
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]]},  # no seq
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": 1, "x": 0},  # extra field
        {"v": 2, "f": FP, "n": NT, "k": [[1, 5]], "s": 1},  # namespace-free version
        {"v": 4, "f": FP, "n": NT, "k": [[1, 5]], "s": 1},
        {"v": True, "f": FP, "n": NT, "k": [[1, 5]], "s": 1},
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": -1},
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": "1"},
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": 1.0},
        {"v": 3, "f": FP, "n": NT, "k": [[1, 5]], "s": 2**63},
        {"v": 3, "f": FP, "n": NT, "k": [], "s": 1},  # wrong number of terms
        {"v": 3, "f": FP, "n": NT, "k": "ab", "s": 1},
    ],
)
def test_signed_but_malformed(payload: Any) -> None:
    invalid(signed(payload))


@pytest.mark.parametrize(
    "key",
    [[2, 5], [1, "5"], [1, True], [5, 2], [0, 1], [9, 0], ["1", 1], [1], [1, None],
     [1, 2**63], [1, -(2**63) - 1], [3, 0.0], [5, True], [2, ["nested"]], [1, 5, 6]],
)  # fmt: skip
def test_signed_but_mistyped_sort_value(key: list[Any]) -> None:
    invalid(signed({"v": 3, "f": FP, "n": NT, "k": [key], "s": 1}))


def test_size_is_bounded() -> None:
    invalid("A" * (MAX_CURSOR_CHARS + 1) + ".AAAA")
    with pytest.raises(MemoryError) as info:
        encode_cursor(FP, ((2, "x" * MAX_CURSOR_CHARS),), 1, SECRET, namespace=NS)
    assert info.value.code == "UNSUPPORTED_ORDER_BY"
    long_value = "y" * 100_000  # long but fine
    token = encode_cursor(FP, ((2, long_value),), 1, SECRET, namespace=NS)
    assert decode_cursor(token, FP, 1, SECRET, namespace=NS).values == ((2, long_value),)


def test_secrets_are_random_and_long_enough() -> None:
    assert len({new_cursor_secret() for _ in range(50)}) == 50
    assert re.fullmatch(r"[0-9a-f]{64}", new_cursor_secret())
    with pytest.raises(MemoryError):
        encode_cursor(FP, (), 1, "short", namespace=NS)


def test_all_is_accurate() -> None:
    public = {n for n in vars(cursors) if not n.startswith("_") and n.isidentifier()}
    exported = set(cursors.__all__)
    assert exported <= public
    assert {n for n in public - exported if callable(getattr(cursors, n))} <= {
        "Any", "Final", "TypeAlias", "OrderBy", "MemoryError", "ErrorCode", "dataclass",
        "Mapping", "Sequence", "annotations",
    }  # fmt: skip
