"""A job's history as ``/queue show`` lists it, from what the system keeps."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from services.estate.model import JobEvent
from services.estate.profile import as_utc

_FRACTION = re.compile(r"(\.\d{6})\d+")


def errors_history(errors: Any) -> list[JobEvent]:
    """An ``errors`` history (River's, Oban's: one ``{at, attempt, error}`` per failed
    attempt) as the attempts that failed, oldest first."""
    out = []
    for entry in errors or []:
        if not isinstance(entry, dict):
            continue
        at = entry.get("at")
        attempt = entry.get("attempt")
        what = f"attempt {attempt} failed" if attempt is not None else "an attempt failed"
        out.append(JobEvent(what, str(entry.get("error") or ""), _moment(at)))
    return out


def _moment(text: Any) -> datetime | None:
    """An ISO time as the systems write it (``Z``, up to nanoseconds), None if it is not."""
    if not isinstance(text, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00"))))
    except ValueError:
        return None
