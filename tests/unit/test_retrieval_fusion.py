"""Fusion functions and the context/mention stages (ditto_worker.retrieval)."""

from __future__ import annotations

import pytest

from ditto_worker.contracts import MemoryItem
from ditto_worker.errors import ConfigError
from ditto_worker.memory.search.fusion import dbsf, zscale
from ditto_worker.retrieval.context import context_scores, mention_scores, neighbour_filter
from ditto_worker.retrieval.fusion import fuse, minmax, normalized_weights, rrf, weighted
from ditto_worker.retrieval.settings import ContextSettings, MentionSettings, RetrievalConfig


def test_minmax_maps_to_unit_interval() -> None:
    assert minmax({"a": 3.0, "b": 1.0, "c": 2.0}) == {"a": 1.0, "b": 0.0, "c": 0.5}
    assert minmax({"a": 5.0, "b": 5.0}) == {"a": 1.0, "b": 1.0}
    assert minmax({}) == {}


def test_weighted_fusion_is_a_convex_combination_of_normalized_scores() -> None:
    lists = {"keyword": {"a": 10.0, "b": 5.0, "c": 0.0}, "vector": {"b": 0.9, "d": 0.1}}
    fused = weighted(lists, {"keyword": 3, "vector": 1})  # scaled to 0.75 / 0.25
    assert fused == pytest.approx({"a": 0.75, "b": 0.375 + 0.25, "c": 0.0, "d": 0.0})
    assert all(0.0 <= value <= 1.0 for value in fused.values())


def test_rrf_is_rank_only_and_normalized() -> None:
    lists = {"keyword": ["a", "b"], "vector": ["b", "a", "c"]}
    fused = rrf(lists, {"keyword": 1, "vector": 1}, k=60)
    top = 1 / 61
    assert fused["a"] == pytest.approx((0.5 / 61 + 0.5 / 62) / top)
    assert fused["b"] == fused["a"]
    assert fused["c"] == pytest.approx((0.5 / 63) / top)
    assert rrf({"keyword": ["x"], "vector": ["x"]}, {"keyword": 1, "vector": 1})["x"] == 1.0


def test_zscale_calibrates_by_the_lists_own_mean_and_deviation() -> None:
    scores = {"a": 4.0, "b": 2.0, "c": 0.0}  # mean 2, sigma sqrt(8/3)
    sigma = (8 / 3) ** 0.5
    scaled = zscale(scores)
    assert scaled["b"] == pytest.approx(0.5)  # the mean sits in the middle
    assert scaled["a"] == pytest.approx(0.5 + 2 / (6 * sigma))
    assert scaled["c"] == pytest.approx(0.5 - 2 / (6 * sigma))
    assert zscale({"a": 1.0, "b": 1.0}) == {"a": 1.0, "b": 1.0} and zscale({}) == {}
    rest = {f"n{i}": float(i % 2) for i in range(20)}
    assert zscale({"x": 100.0, **rest}, spread=1.0)["x"] == 1.0  # clipped to [0, 1]
    assert zscale({"y": -100.0, **rest}, spread=1.0)["y"] == 0.0


def test_dbsf_lets_a_peaked_list_outweigh_a_flat_one_in_that_query() -> None:
    peaked = {"a": 9.0, **{f"k{i}": 1.0 for i in range(9)}}
    flat = {"b": 0.52, **{f"v{i}": 0.50 + 0.001 * i for i in range(9)}}
    fused = dbsf({"keyword": peaked, "vector": flat}, {"keyword": 1, "vector": 1})
    assert max(fused, key=fused.__getitem__) == "a"
    assert all(0.0 <= value <= 1.0 for value in fused.values())
    # min-max gives both list tops 1.0, so the equal-weight tie cannot be told apart
    minmaxed = weighted({"keyword": peaked, "vector": flat}, {"keyword": 1, "vector": 1})
    assert minmaxed["a"] == minmaxed["b"] == 0.5
    assert fuse("dbsf", {"k": [("a", 9.0), ("b", 1.0)]}, {"k": 1}) == dbsf(
        {"k": {"a": 9.0, "b": 1.0}}, {"k": 1}
    )


def test_fuse_dispatch_and_errors() -> None:
    pairs = {"keyword": [("a", 2.0), ("b", 1.0)]}
    assert fuse("weighted", pairs, {"keyword": 1}) == {"a": 1.0, "b": 0.0}
    assert fuse("rrf", pairs, {"keyword": 1}, rrf_k=0) == {"a": 1.0, "b": 0.5}
    with pytest.raises(ValueError):
        fuse("borda", pairs, {"keyword": 1})
    with pytest.raises(ValueError):
        normalized_weights({"keyword": -1}, ["keyword"])
    with pytest.raises(ValueError):
        normalized_weights({"keyword": 0}, ["keyword", "vector"])


def _turn(key: str, session: int, turn: int, speaker: str = "Jon") -> MemoryItem:
    return MemoryItem(
        id=key, content=key, metadata={"session": session, "turn": turn, "speaker": speaker}
    )


def test_mention_boost_matches_whole_words_of_a_metadata_value() -> None:
    memories = {"a": _turn("a", 1, 1, "Jon"), "b": _turn("b", 1, 2, "Gina Lee")}
    settings = MentionSettings(fields=["speaker"], weight=0.2)
    boosted = mention_scores({"a": 0.5}, memories, "What did jon say?", settings)
    assert boosted == pytest.approx({"a": 0.7})
    assert mention_scores({}, memories, "Did Gina Lee call?", settings) == pytest.approx({"b": 0.2})
    assert mention_scores({"a": 0.5}, memories, "Jonathan?", settings) == {"a": 0.5}
    assert mention_scores({"a": 0.5}, memories, "jon", MentionSettings()) == {"a": 0.5}


def test_context_scores_add_neighbours_and_group() -> None:
    settings = ContextSettings(
        group_field="session",
        order_field="turn",
        window=1,
        neighbour_weight=0.5,
        group_weight=0.1,
        group_top=1,
    )
    memories = {k: _turn(k, s, t) for k, s, t in
                [("a", 1, 1), ("b", 1, 2), ("c", 1, 3), ("d", 2, 2)]}  # fmt: skip
    memories["x"] = MemoryItem(id="x", content="no position")
    out = context_scores({"a": 1.0, "c": 0.2, "d": 0.4, "x": 0.3}, memories, settings)
    assert out["b"] == pytest.approx(0.0 + 0.5 * 1.0 + 0.1 * 1.0)  # a neighbour lifts b
    assert out["a"] == pytest.approx(1.0 + 0.5 * 0.0 + 0.1 * 1.0)
    assert out["c"] == pytest.approx(0.2 + 0.5 * 0.0 + 0.1 * 1.0)
    assert out["d"] == pytest.approx(0.4 + 0.1 * 0.4)  # other session: not a neighbour
    assert out["x"] == 0.3  # no position: unchanged


def test_neighbour_filter_covers_the_window_and_keeps_the_user_filter() -> None:
    settings = ContextSettings(group_field="session", order_field="turn", window=2)
    where = neighbour_filter([_turn("a", 3, 5)], settings, {"run": "r1"})
    assert where == {
        "$and": [
            {"run": "r1"},
            {"$or": [{"session": {"$eq": 3}, "turn": {"$gte": 3.0, "$lte": 7.0}}]},
        ]
    }
    assert neighbour_filter([MemoryItem(id="x", content=1)], settings, None) is None


def test_settings_are_strict() -> None:
    config = RetrievalConfig.parse({"fusion": {"method": "rrf", "rrfK": 10}})
    assert config.fusion.rrf_k == 10 and config.strategy == "hybrid"
    for bad in ({"fusion": {"method": "borda"}}, {"nope": 1},
                {"context": {"groupField": "session"}}):  # fmt: skip
        with pytest.raises(ConfigError):
            RetrievalConfig.parse(bad)
