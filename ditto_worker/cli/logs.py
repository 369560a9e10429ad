"""One log format for every process of the fleet: timestamps, text or JSON, no floods.

:func:`configure_logging` replaces the root logger's handlers by one handler (stderr, or
a file) whose lines all look alike:

* ``text`` (default): ``2026-12-01T10:15:02.481Z INFO MainProcess celery.worker.strategy:
  Task MEMORY.GET[…] received`` — UTC ISO 8601 with milliseconds, level, process name,
  logger, message; a traceback follows on its own lines;
* ``json``: one JSON object per line, ``{"ts", "level", "logger", "process", "pid",
  "message"}`` plus ``"exc"`` (the traceback as one string) when there is one.

Repeats are cut (:class:`RepeatFilter`): a warning or error with the same logger and
message template as one logged less than ``repeat_window_s`` ago is dropped, and the next
one logged after the window says how many were dropped — so an outage is one line, then
one line per window, not one per attempt.

Workers: ``ditto-worker worker`` connects :func:`celery_setup_logging` to Celery's
``setup_logging`` signal, so Celery hands its level and ``--logfile`` here instead of
configuring logging itself (its own format differs between the main and pool processes).
Settings: ``fleet.logFormat`` (env ``DITTO_LOG_FORMAT``), ``fleet.logRepeatWindowS``
(``DITTO_LOG_REPEAT_WINDOW_S``). Standard library only.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "JsonFormatter",
    "LogFormat",
    "RepeatFilter",
    "TextFormatter",
    "celery_setup_logging",
    "configure_logging",
]

LogFormat = Literal["text", "json"]

_MAX_TEMPLATES = 1024  # distinct (logger, template) pairs remembered by a RepeatFilter


def _timestamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class TextFormatter(logging.Formatter):
    """``<UTC ISO 8601 ms> <LEVEL> <process> <logger>: <message>`` (+ traceback lines)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _timestamp(record.created)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``process``, ``pid``,
    ``message`` and, with an exception, ``exc`` (its formatted traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "process": record.processName,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


class RepeatFilter(logging.Filter):
    """Drops a WARNING+ record whose logger and message template were logged less than
    ``window_s`` seconds ago; the first one logged after that says how many were dropped.

    Args:
        window_s: seconds; 0 keeps every record.
    """

    def __init__(self, window_s: float = 60.0) -> None:
        super().__init__()
        self.window_s = window_s
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], list[float]] = {}  # key -> [last logged, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.window_s <= 0 or record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.window_s:
                entry[1] += 1
                return False
            dropped = int(entry[1]) if entry is not None else 0
            if len(self._seen) >= _MAX_TEMPLATES:
                self._seen.clear()
            self._seen[key] = [now, 0]
        if dropped:
            record.msg = f"{record.msg} ({dropped} similar lines dropped in the last " \
                         f"{self.window_s:g} s)"  # fmt: skip
        return True


def _handler(logfile: str | None) -> logging.Handler:
    if logfile:
        # reopened when logrotate moves the file
        return logging.handlers.WatchedFileHandler(logfile, encoding="utf-8")
    return logging.StreamHandler(sys.stderr)


def configure_logging(
    level: int | str = logging.WARNING,
    fmt: LogFormat = "text",
    logfile: str | None = None,
    repeat_window_s: float = 60.0,
) -> logging.Handler:
    """Send every log record of this process through one handler in one format.

    Args:
        level: the root level (``"INFO"``, ``logging.DEBUG`` …).
        fmt: ``text`` or ``json`` (``fleet.logFormat``).
        logfile: a file to append to (Celery's ``--logfile``); ``None``: stderr.
        repeat_window_s: :class:`RepeatFilter` window, seconds (``fleet.logRepeatWindowS``).

    Returns:
        The installed handler. Python warnings are logged too (``py.warnings``).
    """
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    handler = _handler(logfile)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RepeatFilter(repeat_window_s))
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    logging.captureWarnings(True)
    return handler


def celery_setup_logging(fmt: LogFormat, repeat_window_s: float) -> Any:
    """A receiver for Celery's ``setup_logging`` signal: Celery's level and ``--logfile``
    into :func:`configure_logging` (connect it strongly; it is called once per process)."""

    def setup(loglevel: Any = None, logfile: Any = None, **_: Any) -> None:
        configure_logging(loglevel or logging.INFO, fmt, logfile or None, repeat_window_s)

    return setup
