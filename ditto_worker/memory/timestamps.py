"""Record timestamps: UTC strings with fixed microsecond precision, compared as text.

``createdAt``/``updatedAt`` are stored as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``
(:func:`timestamp_now`), which compare as instants when compared as strings; a filter
operand on them is any RFC 3339 date-time, rewritten to that form by
:func:`normalize_timestamp` (source: RFC 3339 section 5.6; rules in
:mod:`ditto_worker.memory.filters`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filter_ast import RANGE_OPS

__all__ = ["TIMESTAMP_HELP", "normalize_timestamp", "timestamp_now"]

_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,30}))?"
    r"(?:[Zz]|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
TIMESTAMP_HELP: Final = (
    "needs an RFC 3339 timestamp with an offset (a real date and time, years 0001-9999 "
    "in UTC), e.g. 2025-12-31T23:00:00Z or 2026-01-01T04:00:00.250+05:00"
)


def _format_utc(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the year always 4 digits, unlike ``strftime``)."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
        f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z"
    )


def normalize_timestamp(text: str, op: str = "$eq", where: str = "timestamp") -> str:
    """An RFC 3339 date-time as the stores keep it: UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

    Args:
        text: e.g. ``2026-05-01T17:00:00+05:00``, ``2026-05-01t12:00:00.25Z``, ``…-00:00``;
            a leap second ``:60`` is the first instant of the next second.
        op: the operator the bound is for: digits past the microsecond round ``$gte``/
            ``$lt`` bounds up and ``$gt``/``$lte`` bounds down, so the comparison means
            the same on microsecond timestamps; for ``$eq``/``$ne``/``$in``/``$nin`` the
            result keeps those digits (it then equals no stored timestamp).
        where: the location named in the error (e.g. ``filter.createdAt.$gte``).

    Returns:
        The same instant in UTC, 27 characters (28+ with extra digits, equality only).

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``where`` when ``text`` is not an RFC 3339
            date-time (offset required), names no real date or time, or falls outside
            years 0001-9999 once in UTC (source: RFC 3339 section 5.6).
    """
    match = _RFC3339.fullmatch(text)
    bad = MemoryError(ErrorCode.INVALID_INPUT, f"Invalid input: {where}: {TIMESTAMP_HELP}")
    if match is None:
        raise bad
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, sign, off_hours, off_minutes = match.group(7) or "", *match.groups()[7:]
    offset = timedelta(hours=int(off_hours or 0), minutes=int(off_minutes or 0))
    if offset >= timedelta(hours=24) or int(off_minutes or 0) > 59 or second > 60:
        raise bad
    try:
        zone = timezone(-offset if sign == "-" else offset)
        moment = datetime(year, month, day, hour, minute, min(second, 59),
                          int(fraction[:6].ljust(6, "0")), tzinfo=zone)  # fmt: skip
        moment = (moment + timedelta(seconds=second - min(second, 59))).astimezone(UTC)
        extra = fraction[6:].rstrip("0")
        if extra and op in ("$gte", "$lt"):
            moment += timedelta(microseconds=1)
    except (ValueError, OverflowError):
        raise bad from None
    if moment.year < 1 or moment.year > 9999:
        raise bad
    normal = _format_utc(moment)
    return normal[:-1] + extra + "Z" if extra and op not in RANGE_OPS else normal


def timestamp_now(previous: str | None = None) -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, never before ``previous``.

    Args:
        previous: the latest timestamp already assigned, if any; the result is
            ``max(now, previous)`` so creation order and ``createdAt`` order agree (MEM-PY-6).
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return previous if previous is not None and previous > now else now
