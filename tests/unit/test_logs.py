"""Log format and repeat filter of every ditto-worker process (ditto_worker.cli.logs)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from ditto_worker.cli.logs import JsonFormatter, RepeatFilter, TextFormatter, configure_logging

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def record(
    msg: str, *args: object, level: int = logging.WARNING, name: str = "x.y"
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_text_lines_start_with_a_utc_timestamp() -> None:
    line = TextFormatter().format(record("lost %s", "Redis"))
    assert re.fullmatch(rf"{STAMP} WARNING MainProcess x\.y: lost Redis", line), line


def test_json_lines_are_one_object_with_the_traceback_inside() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = logging.LogRecord("a", logging.ERROR, __file__, 1, "failed %d", (3,), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "failed 3" and data["level"] == "ERROR" and data["logger"] == "a"
    assert re.fullmatch(STAMP, data["ts"]) and "ValueError: boom" in data["exc"]
    assert isinstance(data["pid"], int) and data["process"] == "MainProcess"


def test_repeats_are_dropped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("ditto_worker.cli.logs.time.monotonic", lambda: clock[0])
    keep = RepeatFilter(window_s=60)
    assert keep.filter(record("lost %s", "Redis"))
    for _ in range(250):  # an outage: the same warning five times a second for 50 s
        clock[0] += 0.2
        assert not keep.filter(record("lost %s", "Redis"))
    assert keep.filter(record("another %s", "thing"))  # another template passes
    assert keep.filter(record("lost %s", "Redis", level=logging.INFO))  # below WARNING: kept
    clock[0] += 15
    again = record("lost %s", "Redis")
    assert keep.filter(again)  # 65 s after the first: a new window
    assert again.getMessage() == "lost Redis (250 similar lines dropped in the last 60 s)"
    assert RepeatFilter(window_s=0).filter(record("lost"))


def test_configure_logging_writes_one_format_to_a_file(tmp_path: Path) -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        configure_logging("INFO", "json", str(tmp_path / "w.log"))
        logging.getLogger("celery.worker").info("ready %s", "now")
        logging.getLogger("ditto").debug("not at INFO")
        for handler in root.handlers:
            handler.flush()
        lines = (tmp_path / "w.log").read_text().splitlines()
        assert [json.loads(line)["message"] for line in lines] == ["ready now"]
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)
