"""Small, consistent renderings of numbers, times and text for replies and posts (the
commands' replies and the services' own posts, e.g. an alert thread's triage, share them)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from services.estate import estimate


def count(n: int) -> str:
    return f"{n:,}"


def approx(n: int) -> str:
    """An estimated count: three significant figures, marked, e.g. "≈914,000"."""
    return f"≈{estimate.rounded(n):,}"


def count_of(n: int, estimated: bool) -> str:
    return approx(n) if estimated else count(n)


def age(delta: timedelta | None) -> str:
    if delta is None:
        return "none"
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "-"


def clip(text: str | None, limit: int = 80) -> str:
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def value(v: object) -> str:
    """A column's value as a person reads it: a JSON document, array or boolean as JSON
    (``{"i": 4857}``, ``false``), as the database and the system's own tools print it,
    never as Python (``{'i': 4857}``, ``False``)."""
    if v is None:
        return "-"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict | list | tuple):
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)


def share(part: int, whole: int, *, estimated: bool = False) -> str:
    if not whole:
        return "-"
    return f"{'≈' if estimated else ''}{100 * part / whole:.1f}%"


def left_out(shown: int, groups: int, what: str, *, rest: int, whole: int, unit: str) -> str | None:
    """The line a breakdown cut to its first groups ends with, in the same words wherever
    one is cut: "top 10 of 37 signatures; 1,204 of 4,500 dead letters in the 27 not
    shown" (``rest`` of the ``whole`` counted are in the groups left out). None where
    every group is shown."""
    if groups <= shown:
        return None
    return (
        f"top {count(shown)} of {count(groups)} {what}; {count(rest)} of {count(whole)} "
        f"{unit} in the {count(groups - shown)} not shown"
    )


def not_listed(shown: int, total: int, unit: str) -> str | None:
    """The line a listing cut to its first rows ends with: "20 of 4,500 dead letters
    listed; 4,480 not listed". None where every row is listed."""
    if total <= shown:
        return None
    return f"{count(shown)} of {count(total)} {unit} listed; {count(total - shown)} not listed"
