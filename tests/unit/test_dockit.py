"""The document-store kit (ditto_worker.dockit) on its own: shadow fields and instants,
the translation walk over a dialect, ranked candidates with a tie run at the cut, GET's
order, a call step's checks and the alias switch of a re-embedding (issue 34).

Both document stores run it end to end in their own suites (``plugins/qdrant/tests``,
``plugins/milvus/tests``) and the conformance kit."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from ditto_worker.contracts import MemoryQueryInput
from ditto_worker.dockit import (
    Clock,
    by_creation,
    check_step,
    field_hash,
    finish_cut_switch,
    iso,
    keep_target,
    parse_us,
    ranked,
    shadow_fields,
    step_timeout,
    switch,
    time_bound,
    time_order,
    time_value,
    translate,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import FieldRef, Scalar, parse_filter
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.runtime.cancel import CancelToken


def test_shadow_fields_type_every_object_path_but_never_into_arrays() -> None:
    fields = shadow_fields({"n": 5, "s": "x", "b": True, "z": None, "o": {"a": [1]}})
    h = field_hash
    assert fields["ft"] == {h(["n"]): "n", h(["s"]): "s", h(["b"]): "b", h(["z"]): "z",
                            h(["o"]): "o", h(["o", "a"]): "a"}  # fmt: skip
    assert fields["fn"] == {h(["n"]): 5} and fields["fs"] == {h(["s"]): "x"}
    assert fields["fb"] == {h(["b"]): True}
    assert shadow_fields(None) == {}
    assert shadow_fields(None, keep_empty=True) == {"ft": {}, "fn": {}, "fs": {}, "fb": {}}
    assert field_hash(["a.b"]) != field_hash(["a", "b"])
    assert len(field_hash(["x"])) == 25 and field_hash(["x"]).startswith("p")


def test_instants_round_trip_and_a_bound_becomes_the_microsecond_it_names() -> None:
    us = 1_700_000_000_123_456
    assert iso(us) == "2023-11-14T22:13:20.123456Z"
    assert parse_us(iso(us)) == us and parse_us("2023-11-14") is None
    assert time_bound("$gt", iso(us)) == ("$gt", us)
    # a prefix is placed by the fixed-width order: every instant of that day is >= it
    assert time_bound("$gte", "2023-11-14") == ("$gte", parse_us("2023-11-14T00:00:00.000000Z"))
    assert time_bound("$lt", "2023-11-14") == ("$lt", parse_us("2023-11-14T00:00:00.000000Z"))
    assert time_bound("$gt", "99999") is False and time_bound("$lt", "99999") is True
    assert time_bound("$gt", 5) is False
    assert time_value(iso(us)) == us and time_value(5) is None and time_value("x") is None


def test_the_clock_hands_out_unique_increasing_instants() -> None:
    clock = Clock()
    first = clock.take(3)
    assert clock.take(1) >= first + 3


class Text:
    """A dialect writing conditions as text, negated leaves marked."""

    def all_of(self, parts: list[str]) -> str:
        return "all(" + ",".join(parts) + ")"

    def any_of(self, parts: list[str]) -> str:
        return "any(" + ",".join(parts) + ")"

    def negate(self, part: str) -> str:
        return f"not {part}"

    def exists(self, field: FieldRef, exists: bool) -> str:
        return f"{field.name}?{exists}"

    def member(self, field: FieldRef, values: Sequence[Scalar], negated: bool) -> str:
        return f"{field.name} in {list(values)}{'!' if negated else ''}"

    def equal(self, field: FieldRef, value: Scalar, negated: bool) -> str:
        return f"{field.name}=={value!r}{'!' if negated else ''}"

    def ranged(self, field: FieldRef, op: str, bound: Scalar) -> str:
        return f"{field.name}{op}{bound!r}"


def test_translate_walks_the_filter_and_negates_ne_and_nin_with_a_two_valued_leaf() -> None:
    node = parse_filter(
        {
            "$or": [{"a": {"$ne": 1}}, {"b": {"$nin": ["x"]}}],
            "c": {"$exists": False},
            "d": {"$gte": 2},
            "e": "y",
        }  # fmt: skip
    )
    assert node is not None
    text = translate(node, Text())
    assert text.startswith("all(") and "any(not a==1!,not b in ['x']!)" in text
    assert "c?False" in text and "d$gte2" in text and "e=='y'" in text


def test_time_order_accepts_one_instant_and_names_the_store_otherwise() -> None:
    order = time_order(MemoryQueryInput(order_by=[{"field": "updatedAt", "direction": "desc"}]),
                       "Test")  # fmt: skip
    assert order.field == "updatedAt" and order.desc and order.node is None
    assert order.key(5, 1, "a") == (-5, 1, "a")
    secret, other = "s" * 32, "o" * 32
    cursor = order.next_cursor(5, "a", 1, secret, "ns")
    assert order.after(cursor, secret, "ns") == (5, (-5, 1, "a"))
    assert order.after(None, secret, "ns") is None
    with pytest.raises(MemoryError) as caught:
        order.after(cursor, other, "ns")
    assert caught.value.code == ErrorCode.INVALID_CURSOR
    with pytest.raises(MemoryError) as caught:
        time_order(MemoryQueryInput(order_by=[{"field": "metadata.n"}]), "Test")
    assert caught.value.code == ErrorCode.UNSUPPORTED_ORDER_BY
    assert "the Test store" in caught.value.safe_message


def test_ranked_reads_a_tie_run_at_the_cut_whole_and_orders_it_by_sequence() -> None:
    pool = [(0.9, 9, "a")] + [(0.5, seq, f"t{seq}") for seq in range(20, 0, -1)]
    asked: list[int] = []

    def fetch(n: int) -> list[tuple[float, int, str]]:
        asked.append(n)
        return pool[:n]

    best = ranked(fetch, 3, lambda r: r[0], lambda r: (r[1], r[2]))
    assert best == [(0.9, 9, "a"), (0.5, 1, "t1"), (0.5, 2, "t2")]
    assert asked == [4, 16, 64]
    assert ranked(fetch, 3, lambda r: r[0], lambda r: (r[1], r[2]), most=16)[1:] == [
        (0.5, 6, "t6"), (0.5, 7, "t7")]  # fmt: skip


def test_by_creation_keeps_each_record_once_in_creation_order() -> None:
    by_id = {"b": (2, "b")}
    assert by_creation(by_id, [(1, "a"), (2, "b")], lambda r: r) == [(1, "a"), (2, "b")]


def test_a_step_checks_cancel_and_deadline_and_caps_its_timeout() -> None:
    token = CancelToken()
    assert check_step(MemoryCallOptions(cancel=token)) is None
    token.cancel()
    with pytest.raises(MemoryError) as caught:
        check_step(MemoryCallOptions(cancel=token))
    assert caught.value.code == ErrorCode.MEMORY_CANCELLED
    assert check_step(MemoryCallOptions(cancel=token), check_cancel=False) is None
    with pytest.raises(MemoryError) as caught:
        check_step(MemoryCallOptions(deadline=time.time() - 1))
    assert caught.value.code == ErrorCode.MEMORY_TIMEOUT
    left = check_step(MemoryCallOptions(deadline=time.time() + 100))
    assert left is not None and 0 < left <= 100
    assert step_timeout(10.0, None) == 10.0 and step_timeout(10.0, 2.0) == 2.0
    assert step_timeout(10.0, -1.0) == 0.01


class Collections:
    """Collections and aliases in a dict, every request logged."""

    def __init__(self, collections: dict[str, Any], aliases: dict[str, str]) -> None:
        self.collections, self.aliases, self.log = collections, aliases, list[str]()

    def exists(self, name: str) -> bool:
        return name in self.collections or name in self.aliases

    def recorded(self, name: str) -> Any:
        return self.collections[self.aliases.get(name, name)]

    def drop(self, name: str) -> None:
        self.log.append(f"drop {name}")
        del self.collections[name]

    def alias(self, target: str, name: str, move: bool) -> None:
        self.log.append(f"{'move' if move else 'create'} {name}->{target}")
        self.aliases[name] = target


def test_switch_moves_an_alias_then_runs_the_last_pass_or_replaces_a_collection() -> None:
    aliased = Collections({"m-1": {}, "m-2": {"reindexOf": "m-1"}}, {"m": "m-1"})
    assert switch(aliased, "m", "m-1", "m-2", lambda: 7) == 7
    assert aliased.log == ["move m->m-2", "drop m-1"] and aliased.aliases["m"] == "m-2"
    plain = Collections({"m": {}, "m-2": {"reindexOf": "m"}}, {})
    assert switch(plain, "m", "m", "m-2", lambda: 7) == 0
    assert plain.log == ["drop m", "create m->m-2"]


def test_a_cut_switch_is_finished_and_only_a_copy_of_the_source_is_kept() -> None:
    cut = Collections({"m-2": {"reindexOf": "m"}}, {})
    assert finish_cut_switch(cut, "m", "m-2") and cut.aliases == {"m": "m-2"}
    assert not finish_cut_switch(cut, "m", "m-2")
    empty = Collections({}, {})
    assert finish_cut_switch(empty, "m", "m-2") and empty.log == []
    held = Collections({"m": {}, "m-2": {"reindexOf": "m"}, "m-3": {"reindexOf": "x"}}, {})
    assert keep_target(held, "m-2", "m") and not keep_target(held, "m-3", "m")
    assert held.log == ["drop m-3"] and not keep_target(held, "m-4", "m")
