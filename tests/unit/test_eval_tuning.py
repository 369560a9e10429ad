"""Leave-one-out choice of hybrid settings and the eval plot (issue 28 items 7 and 8)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ditto_worker.cli.eval import EvalReport, StrategyReport
from ditto_worker.cli.tuning import (
    PLAIN_RRF,
    CachingEmbedder,
    MemoSource,
    candidate_grid,
    fold_summary,
    format_leave_one_out,
    leave_one_out,
    required_wins,
    rule_grid,
    score_grid,
    setting_name,
    ship_decision,
)
from ditto_worker.contracts import MemorySearchInput, MemoryWriteInput
from ditto_worker.testing import HashingEmbedder

RRF = setting_name(PLAIN_RRF)


def test_grid_starts_with_plain_rrf_and_names_are_unique() -> None:
    grid = candidate_grid()
    assert next(iter(grid)) == RRF == "rrf kw0.5 m0 -"
    assert len(grid) == 108
    assert all(setting_name(config) == name for name, config in grid.items())


def test_the_rule_grid_compares_four_settings_plain_rrf_first() -> None:
    grid = rule_grid()
    assert list(grid) == [RRF, "weighted kw0.8 m0.1 w2/n0.3/g0.3",
                          "dbsf kw0.5 m0.1 w2/n0.3/g0.3", "dbsf kw0.5 m0 -"]  # fmt: skip
    assert all(setting_name(config) == name for name, config in grid.items())
    assert set(grid) <= set(candidate_grid()) | {n for n in grid if n.startswith("dbsf")}


def test_each_fold_chooses_on_the_other_files_only() -> None:
    scores = {
        "a.json": {RRF: 0.70, "x": 0.90, "y": 0.60},
        "b.json": {RRF: 0.72, "x": 0.65, "y": 0.80},
    }
    folds = {f.held_out: f for f in leave_one_out(scores, shipped="y")}
    # held out a: chosen on b alone (y), scored on a; in-sample best on a is x
    assert (folds["a.json"].chosen, folds["a.json"].chosen_recall) == ("y", 0.60)
    assert (folds["a.json"].in_sample, folds["a.json"].in_sample_recall) == ("x", 0.90)
    assert (folds["b.json"].chosen, folds["b.json"].chosen_recall) == ("x", 0.65)
    assert folds["a.json"].rrf_recall == 0.70 and folds["b.json"].shipped_recall == 0.80
    assert not ship_decision(list(folds.values()))  # tuned beats RRF in-sample only
    assert "ship plain RRF" in format_leave_one_out(list(folds.values()), "x")


def test_shipping_needs_a_win_over_rrf_in_every_fold() -> None:
    scores = {"a": {RRF: 0.5, "x": 0.6}, "b": {RRF: 0.5, "x": 0.7}}
    folds = leave_one_out(scores, shipped="x")
    assert ship_decision(folds)
    assert "ship 'x'" in format_leave_one_out(folds, "x")
    tie = leave_one_out({"a": {RRF: 0.5, "x": 0.5}, "b": {RRF: 0.5, "x": 0.7}}, shipped="x")
    assert not ship_decision(tie)
    with pytest.raises(ValueError, match="two"):
        leave_one_out({"a": {RRF: 0.5}}, shipped=RRF)
    with pytest.raises(ValueError, match="not scored"):
        leave_one_out({"a": {RRF: 0.5}, "b": {RRF: 0.5}}, shipped="missing")


def test_six_files_ship_on_five_wins_and_the_table_has_mean_and_worst_rows() -> None:
    assert [required_wins(n) for n in (2, 3, 5, 6, 12)] == [2, 3, 5, 5, 10]
    files = {f"{i}.json": {RRF: 0.6, "x": 0.7} for i in range(6)}
    files["5.json"] = {RRF: 0.6, "x": 0.5}  # x loses one fold of six: still ships
    folds = leave_one_out(files, shipped="x")
    assert [f.chosen for f in folds] == ["x"] * 6 and ship_decision(folds)
    summary = fold_summary(folds)
    assert summary["chosen_recall"] == (pytest.approx((5 * 0.7 + 0.5) / 6), 0.5)
    assert summary["rrf_recall"] == (pytest.approx(0.6), 0.6)
    table = format_leave_one_out(folds, "x")
    mean_row = next(line for line in table.splitlines() if line.startswith("mean"))
    worst_row = next(line for line in table.splitlines() if line.startswith("worst fold"))
    assert mean_row.split()[1:3] == ["0.667", "0.600"]
    assert worst_row.split()[2:4] == ["0.500", "0.600"]
    assert "beats plain RRF in 5 of 6 folds (needed: 5): ship 'x'" in table
    files["4.json"] = {RRF: 0.6, "x": 0.6}  # a tie is no win: 4 of 6
    assert not ship_decision(leave_one_out(files, shipped="x"))
    with pytest.raises(ValueError, match="no folds"):
        fold_summary([])


def test_caching_embedder_embeds_each_text_once_and_keeps_identities_apart(
    tmp_path: Path,
) -> None:
    inner = HashingEmbedder()
    cache = CachingEmbedder(inner, tmp_path / "cache.json")
    first = cache.embed(["a", "b", "a"])
    assert inner.calls == [["a", "b"]] and first[0] == first[2]
    assert cache.embed(["b", "c"])[0] == first[1] and inner.calls[-1] == ["c"]
    cache.save()
    again = HashingEmbedder()
    assert CachingEmbedder(again, tmp_path / "cache.json").embed(["a"]) == [first[0]]
    assert again.calls == []
    other = HashingEmbedder(seed=5)  # another identity: the file's vectors are not its own
    CachingEmbedder(other, tmp_path / "cache.json").embed(["a"])
    assert other.calls == [["a"]]
    assert json.loads((tmp_path / "cache.json").read_text())["identity"] == (
        inner.identity.describe()
    )


def test_memo_source_answers_identical_calls_once(tmp_path: Path) -> None:
    from ditto_plugin_sqlite import SqliteMemoryStore

    with SqliteMemoryStore(tmp_path / "m.sqlite", embedder=HashingEmbedder()) as store:
        store.write(MemoryWriteInput.model_validate({"memories": [{"content": "a puppy"}]}))
        memo = MemoSource(store)
        request = MemorySearchInput(query="puppy", strategy="keyword", limit=5)
        first = memo.search(request)
        assert memo.search(request) is first and len(first) == 1
        assert memo.search(request.model_copy(update={"limit": 4})) is not first


LOCOMO = {
    "speaker_a": "Gina",
    "speaker_b": "Jon",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Gina", "dia_id": "D1:1", "text": "I adopted a puppy named Luna"},
        {"speaker": "Jon", "dia_id": "D1:2", "text": "I opened a dance studio"},
        {"speaker": "Gina", "dia_id": "D1:3", "text": "My store sells clothes"},
    ],
    "qa": [
        {"question": "What is the name of Gina's puppy?", "answer": "Luna",
         "evidence": ["D1:1"], "category": 4},
        {"question": "What did Jon open?", "answer": "a dance studio",
         "evidence": ["D1:2"], "category": 4},
    ],
}  # fmt: skip


def test_a_turn_sharing_an_image_carries_its_caption_as_metadata(tmp_path: Path) -> None:
    from ditto_worker.cli.demo import load_conversation
    from ditto_worker.cli.eval import turn_drafts

    data = json.loads(json.dumps(LOCOMO))
    data["session_1"][0] |= {"img_url": ["https://example.invalid/p.jpg"],
                             "blip_caption": "a photo of a small dog"}  # fmt: skip
    path = tmp_path / "img.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    drafts = turn_drafts(load_conversation(path))
    assert drafts[0]["content"] == "I adopted a puppy named Luna"  # the text alone
    assert drafts[0]["metadata"]["image"] == "a photo of a small dog"
    assert all("image" not in draft["metadata"] for draft in drafts[1:])


def test_score_grid_runs_every_setting_on_a_real_store(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    grid = dict(list(candidate_grid().items())[:3])
    scores = score_grid(path, CachingEmbedder(HashingEmbedder()), grid)
    assert list(scores) == list(grid)
    assert all(value == 1.0 for value in scores.values())  # 3 turns: evidence in the top 10


def _report(name: str) -> EvalReport:
    report = EvalReport(name, 10, 1.0)
    for strategy, base in (("keyword", 0.5), ("hybrid", 0.7)):
        report.strategies[strategy] = StrategyReport(
            strategy, 4, base, base + 0.1, {1: (1, base, base), 4: (3, base, base + 0.2)},
            recall_at_k=[base * k / 10 for k in range(1, 11)], latencies_ms=[1.0, 2.0, 30.0],
        )  # fmt: skip
    return report


def test_category_recalls_pool_by_questions() -> None:
    from ditto_worker.cli.eval_plot import category_recalls

    report = _report("a.json")
    report.strategies["keyword"].per_category = {4: (1, 0.0, 0.0)}
    other = _report("b.json")
    other.strategies["keyword"].per_category = {4: (3, 1.0, 1.0)}
    pooled = category_recalls([report, other])
    assert pooled["keyword"] == {4: (4, 0.75)}
    assert pooled["hybrid"][1] == (2, pytest.approx(0.7))


def test_plot_writes_a_png_and_the_module_does_not_import_matplotlib(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from ditto_worker.cli.eval_plot import plot_reports

    out = plot_reports([_report("a.json"), _report("b.json")], tmp_path / "eval.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    folds = leave_one_out({"a": {RRF: 0.5, "x": 0.6}, "b": {RRF: 0.5, "x": 0.7}}, shipped="x")
    with_folds = plot_reports([_report("a.json")], tmp_path / "folds.png", folds)
    assert with_folds.stat().st_size > out.stat().st_size  # a second row: the folds panel
    code = "import sys, ditto_worker.cli.eval_plot, ditto_worker.cli.tuning; " \
           "print('matplotlib' in sys.modules)"  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_leave_one_out_needs_two_files_before_anything_loads(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ditto_worker.cli.commands import app

    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", "locomo", str(path), "--leave-one-out"])
    assert result.exit_code == 2
    assert "--leave-one-out needs at least two files" in result.output
