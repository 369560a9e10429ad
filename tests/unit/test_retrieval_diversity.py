"""Diversity across groups (context.groupPenalty) and relative dates (issue 38 item 2)."""

from __future__ import annotations

import pytest

from ditto_worker.cli.eval_dates import resolved_dates, session_day
from ditto_worker.contracts import MemoryItem
from ditto_worker.memory.search.diversity import group_diversity
from ditto_worker.retrieval.settings import ContextSettings, RetrievalConfig


def _turn(key: str, session: int, turn: int) -> MemoryItem:
    return MemoryItem(id=key, content=key, metadata={"session": session, "turn": turn})


MEMORIES = {k: _turn(k, s, t) for k, s, t in
            [("a", 1, 1), ("b", 1, 2), ("c", 1, 3), ("d", 2, 1), ("e", 2, 2)]}  # fmt: skip
MEMORIES["x"] = MemoryItem(id="x", content="no position")
SCORES = {"a": 1.0, "b": 0.95, "c": 0.9, "d": 0.8, "e": 0.5, "x": 0.7}


def _ranked(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda key: -scores[key])


def test_each_further_result_of_a_group_scores_the_penalty_less() -> None:
    settings = ContextSettings(group_field="session", order_field="turn", group_penalty=0.1)
    out = group_diversity(SCORES, MEMORIES, settings, depth=4)
    # a (1.0); b 0.85 vs d 0.8: b; then c 0.7 vs d 0.8 vs x 0.7: d; then c / x tie 0.7: c first
    assert _ranked(out)[:4] == ["a", "b", "d", "c"]
    assert out == pytest.approx({"a": 1.0, "b": 0.85, "d": 0.8, "c": 0.7, "x": 0.7, "e": 0.4})
    taken = [out[key] for key in _ranked(out)]
    assert taken == sorted(taken, reverse=True)  # scores never rise down the list


def test_a_larger_penalty_spreads_the_results_over_groups() -> None:
    settings = ContextSettings(group_field="session", order_field="turn", group_penalty=0.5)
    assert _ranked(group_diversity(SCORES, MEMORIES, settings, depth=3))[:3] == ["a", "d", "x"]


def test_no_penalty_changes_nothing() -> None:
    settings = ContextSettings(group_field="session", order_field="turn")
    assert settings.group_penalty == 0.0
    out = group_diversity(SCORES, MEMORIES, settings, depth=5)
    assert out == SCORES and out is not SCORES


def test_the_penalty_is_a_checked_setting() -> None:
    config = RetrievalConfig.parse({"context": {"groupField": "s", "orderField": "t",
                                                "groupPenalty": 0.2}})  # fmt: skip
    assert config.context.group_penalty == 0.2
    with pytest.raises(Exception, match="groupPenalty|group_penalty"):
        RetrievalConfig.parse({"context": {"groupPenalty": -1}})


def test_relative_dates_are_resolved_against_the_session_date() -> None:
    when = "1:56 pm on 8 May, 2023"  # a Monday
    assert session_day(when) is not None and session_day("sometime") is None
    assert resolved_dates("I went to a support group yesterday", when) == ["7 May 2023"]
    assert resolved_dates("Last Saturday we hiked", when) == ["6 May 2023"]
    assert resolved_dates("last Monday", when) == ["1 May 2023"]
    assert resolved_dates("last week and last month", when) == ["1 May 2023", "April 2023"]
    assert resolved_dates("two weeks ago, 3 days ago", when) == ["24 April 2023", "5 May 2023"]
    assert resolved_dates("a few years ago; last year", when) == ["2022", "2020"]
    assert resolved_dates("tonight", when) == ["8 May 2023"]
    assert resolved_dates("I love painting", when) == []
    assert resolved_dates("yesterday", "no date here") == []
