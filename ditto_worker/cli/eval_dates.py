"""Relative dates in a turn resolved against its session's date (issue 38 item 2).

A conversation turn says "I went to a support group yesterday"; the session it belongs to
happened "1:56 pm on 8 May, 2023". :func:`resolved_dates` turns the relative expressions
of a turn into the dates they name ("7 May 2023"), so the eval can write them into a
metadata field that the store indexes with the turn (``eval locomo --dates``: metadata
``when``, ``indexFields`` ``speaker, when``). Turns without a relative expression get
nothing (their indexed text, and so their vector, stays as it was).

Expressions (case-insensitive, whole words): ``yesterday``, ``last night``, ``today``,
``tonight``, ``this morning`` / ``afternoon`` / ``evening``, ``last <weekday>``, ``last
weekend``, ``last week``, ``last month``, ``last year``, ``N days`` / ``weeks`` / ``months``
/ ``years ago`` (N a digit or one … ten), ``a few days ago``, ``next month``. A week or a
weekend is named by the date of its Monday or Saturday, a month as "May 2023", a year as
"2022". Nothing is guessed beyond these.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Final

__all__ = ["resolved_dates", "session_day"]

_MONTHS: Final = ("january", "february", "march", "april", "may", "june", "july",
                  "august", "september", "october", "november", "december")  # fmt: skip
_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                    "sunday")  # fmt: skip
_NUMBERS: Final = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
                   "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "few": 3,
                   "couple of": 2}  # fmt: skip
_SESSION: Final = re.compile(r"(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})")
_AGO: Final = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|a couple of)\s+"
    r"(day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)


def session_day(text: str) -> date | None:
    """The day of a LoCoMo session date ("1:56 pm on 8 May, 2023" -> 2023-05-08), or
    ``None`` when it names none."""
    match = _SESSION.search(text)
    if match is None or match.group(2).lower() not in _MONTHS:
        return None
    month = _MONTHS.index(match.group(2).lower()) + 1
    try:
        return date(int(match.group(3)), month, int(match.group(1)))
    except ValueError:
        return None


def _day(value: date) -> str:
    return f"{value.day} {_MONTHS[value.month - 1].title()} {value.year}"


def _month(year: int, month: int) -> str:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return f"{_MONTHS[month - 1].title()} {year}"


def _ago(count: int, unit: str, today: date) -> str:
    if unit == "day":
        return _day(today - timedelta(days=count))
    if unit == "week":
        return _day(today - timedelta(weeks=count))
    if unit == "month":
        return _month(today.year, today.month - count)
    return str(today.year - count)


def _fixed(lower: str, today: date) -> list[str]:
    found = []
    if re.search(r"\b(yesterday|last night)\b", lower):
        found.append(_day(today - timedelta(days=1)))
    if re.search(r"\b(today|tonight|this (morning|afternoon|evening))\b", lower):
        found.append(_day(today))
    for name in re.findall(r"\blast (" + "|".join(_WEEKDAYS) + r")\b", lower):
        back = (today.weekday() - _WEEKDAYS.index(name) - 1) % 7 + 1
        found.append(_day(today - timedelta(days=back)))
    if re.search(r"\blast weekend\b", lower):
        found.append(_day(today - timedelta(days=(today.weekday() - 5) % 7 or 7)))
    if re.search(r"\blast week\b", lower):
        found.append(_day(today - timedelta(days=today.weekday() + 7)))
    if re.search(r"\blast month\b", lower):
        found.append(_month(today.year, today.month - 1))
    if re.search(r"\bnext month\b", lower):
        found.append(_month(today.year, today.month + 1))
    if re.search(r"\blast year\b", lower):
        found.append(str(today.year - 1))
    return found


def resolved_dates(text: str, session_date: str) -> list[str]:
    """The dates the relative expressions of ``text`` name, seen from ``session_date``
    (LoCoMo's "1:56 pm on 8 May, 2023"), distinct, in the order found; ``[]`` when the
    session date names no day or the text has no such expression."""
    today = session_day(session_date)
    if today is None:
        return []
    lower = text.lower()
    found = _fixed(lower, today)
    for amount, unit in _AGO.findall(lower):
        count = int(amount) if amount.isdigit() else _NUMBERS.get(amount.replace("a ", ""), 1)
        found.append(_ago(count, unit, today))
    return list(dict.fromkeys(found))
