"""bench/scale_report.py: the store_scale table, its JSON copy and its plot (issue 28 item 8).

The figures are measured by the bench; here a report of known values goes through the
printing, the JSON round trip and the plot, so the output format is held.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("scale_report", BENCH / "scale_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _report() -> dict[str, Any]:
    def figures(p50: float, calls: int = 20) -> dict[str, Any]:
        rows = {"QUERY eq": [p50, p50 * 2, calls], "SEARCH vector": [p50 * 3, p50 * 4, calls]}
        return {"rate": 1234.0, "load_s": 1.0, "total_s": 2.0, "rows": rows}

    return {
        "command": "python bench/store_scale.py --sizes 10,100",
        "sizes": [10, 100],
        "queries": 20,
        "budget_s": 5.0,
        "embedder": "hashing",
        "caps": {"milvus-lite": 10},
        "load_average": {"start": [1.0, 2.0, 3.0], "end": [4.0, 5.0, 6.0]},
        "stores": {
            "sqlite": {10: figures(1.5), 100: figures(2.5)},
            "milvus-lite": {10: figures(700.0, calls=3)},
        },
    }


def test_the_table_names_a_capped_store_and_short_samples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _module()
    report.print_report(_report())
    out = capsys.readouterr().out
    assert "load average (1/5/15 min) at start 1.00/2.00/3.00, at end 4.00/5.00/6.00" in out
    assert "NOT MEASURED at 100: milvus-lite is capped at 10 memories (--cap)" in out
    assert "700.00 / 1400.00 (3)" in out  # a p50 over 3 of 20 calls says so
    assert "1.50 / 3.00" in out and "1.50 / 3.00 (" not in out
    tables = out.split("memories; latency")
    assert "milvus-lite" in tables[1] and "milvus-lite" not in tables[2].split("NOT MEASURED")[0]


def test_json_round_trip_and_plot(tmp_path: Path) -> None:
    report = _module()
    saved = tmp_path / "scale.json"
    report.save_report(_report(), str(saved))
    loaded = report.load_report(str(saved))
    assert loaded["stores"]["sqlite"][100]["rows"]["QUERY eq"] == [2.5, 5.0, 20]
    png = tmp_path / "scale.png"
    report.plot_report(loaded, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_caps_parse_and_refuse_malformed() -> None:
    report = _module()
    assert report.parse_caps("milvus=10000, qdrant=20000") == {"milvus": 10000, "qdrant": 20000}
    assert report.parse_caps("") == {}
    with pytest.raises(SystemExit, match="STORE=SIZE"):
        report.parse_caps("milvus:10")


def test_the_table_shows_load_averages_and_figures_after_the_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _module()
    given = _report()
    sqlite = given["stores"]["sqlite"][100]
    sqlite["rows"]["QUERY eq"] = [2.5, 5.0, 20, 7.25]
    sqlite["after"] = {"index build s": 812.4, "size MB": 4096.0}
    report.print_report(given)
    out = capsys.readouterr().out.split("100 memories; latency")[1]
    assert "2.50 / 5.00 @7.2" in out  # the 1-minute load average beside the figure
    assert "7.50 / 10.00" in out and "10.00 @" not in out  # a row without one has none
    assert "index build s" in out and "812.4" in out
    assert "size MB" in out and "4,096.0" in out
