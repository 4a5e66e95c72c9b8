"""Alertmanager's webhook payload (version "4"), validated strictly where it matters and
leniently where Alertmanager may grow: unknown or newer fields are ignored.

Times are RFC 3339 with 0 to 9 fractional digits; Python keeps microseconds, so digits
past the sixth are dropped. A firing alert carries ``endsAt = 0001-01-01T00:00:00Z``,
Go's zero time, which becomes ``None``.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

MAX_ALERTS = 1000  # a webhook_config's max_alerts should stay below this
MAX_TEXT = 10_000
MAX_LABELS = 64

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)


class BadPayload(ValueError):
    """The body is not a notification queuebot can store; the message says why."""


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time, in UTC; Go's zero time (year 1) is None."""
    if value is None:  # as stored by queuebot; Alertmanager sends the zero time
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise ValueError("expected an RFC 3339 time such as 2026-11-30T12:00:00.123Z")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> datetime | None:
    """The same times come again and again (a group is re-sent whole): parsed once."""
    matched = _RFC3339.match(value)
    if matched is None:
        raise ValueError(f"{value[:40]!r} is not an RFC 3339 time such as 2026-11-30T12:00:00.123Z")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = matched.groups()
    if int(year) <= 1:
        return None
    micro = int((fraction or "0").ljust(6, "0")[:6])
    zone = UTC
    if not zulu:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        zone = timezone(-offset if sign == "-" else offset)
    try:
        at = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, zone
        )
    except ValueError as exc:
        raise ValueError(f"{value[:40]!r} is not a real time: {exc}") from None
    return at.astimezone(UTC)


Time = Annotated[datetime | None, BeforeValidator(parse_time)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Labels = Annotated[dict[Annotated[str, Field(max_length=200)], Text], Field(max_length=MAX_LABELS)]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class Alert(_Lenient):
    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    startsAt: Time
    endsAt: Time = None
    generatorURL: Text = ""
    fingerprint: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z]+$")]

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "alert")


class Notification(_Lenient):
    version: Literal["4"]
    receiver: Annotated[str, Field(max_length=200)]
    status: Literal["firing", "resolved"]
    groupKey: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Labels = Field(default_factory=dict)
    externalURL: Text = ""
    truncatedAlerts: Annotated[int, Field(ge=0)] = 0
    alerts: Annotated[list[Alert], Field(max_length=MAX_ALERTS)]

    def stored(self) -> dict[str, Any]:
        """The form kept in the inbox (times as ISO strings, no unknown fields)."""
        return self.model_dump(mode="json")


def parse(body: bytes) -> Notification:
    """The notification in ``body``, or ``BadPayload`` saying what is wrong with it."""
    try:
        data = orjson.loads(body)  # a third of the stdlib's time, on every notification
    except orjson.JSONDecodeError as exc:  # bad UTF-8 too
        raise BadPayload(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadPayload("the body must be a JSON object (Alertmanager's webhook payload)")
    try:
        return Notification.model_validate(data)
    except ValidationError as exc:
        raise BadPayload(describe(exc)) from None


def describe(exc: ValidationError, *, most: int = 5) -> str:
    """The first few problems, each with where it is (``alerts.0.startsAt: ...``)."""
    problems = []
    for err in exc.errors(include_url=False)[:most]:
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            message = "required"
        elif err["type"] == "literal_error" and where == "version":
            message = 'expected "4" (Alertmanager\'s webhook version)'
        problems.append(f"{where}: {message}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")


def from_stored(data: dict[str, Any]) -> Notification:
    return Notification.model_validate(data, strict=False)
