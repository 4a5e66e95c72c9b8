"""Alertmanager's webhook payload (version "4"), validated strictly where it matters and
leniently where Alertmanager may grow: unknown or newer fields are ignored.

Times are RFC 3339 with 0 to 9 fractional digits; Python keeps microseconds, so digits
past the sixth are dropped. A firing alert carries ``endsAt = 0001-01-01T00:00:00Z``,
Go's zero time, which becomes ``None``. A time that has no UTC form queuebot can keep
(``9999-12-31T23:59:59-23:59`` is in year 10000 in UTC), or one written in year 0000, is
refused like any bad time: the years kept run from 0001 to 9999.

Every text that is stored (labels, annotations, receiver, groupKey, URLs) is refused when
it holds a NUL character or a lone surrogate: PostgreSQL cannot keep either, and a row
that fails its INSERT would fail every notification committed with it. The refusal names
the field (``groupLabels.alertname contains a NUL character ...``).
"""

from __future__ import annotations

import functools
import json
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
    if int(year) == 0:  # RFC 3339's four digits allow it; no time queuebot keeps is in it
        raise ValueError(
            f"{value[:40]!r} is in year 0000: queuebot keeps times of the years 0001 to 9999 "
            "(Alertmanager writes 0001-01-01T00:00:00Z for no time)"
        )
    if int(year) == 1:  # Go's zero time, but only on a day that exists
        try:
            datetime(1, int(month), int(day), int(hour), int(minute), int(second))
        except ValueError as exc:
            raise ValueError(f"{value[:40]!r} is not a real time: {exc}") from None
        return None
    micro = int((fraction or "0").ljust(6, "0")[:6])
    zone = UTC
    if not zulu:
        if int(off_h) > 23 or int(off_m) > 59:
            raise ValueError(
                f"{value[:40]!r} has an offset out of range: RFC 3339 offsets run from "
                "-23:59 to +23:59"
            )
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        zone = timezone(-offset if sign == "-" else offset)
    try:
        at = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, zone
        )
    except ValueError as exc:
        raise ValueError(f"{value[:40]!r} is not a real time: {exc}") from None
    try:
        return at.astimezone(UTC)
    except OverflowError:  # only the end can overflow: year 1 is the zero time above
        raise ValueError(
            f"{value[:40]!r} is after 9999-12-31T23:59:59.999999Z in UTC, the last time "
            "queuebot can keep"
        ) from None


_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """What in ``text`` neither PostgreSQL nor SQLite can keep as text (a NUL character,
    a lone surrogate), in words to follow the field's name; None when it can be kept."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return (
            "contains a NUL character (\\u0000), which cannot be stored: remove it where it "
            "is set (the alert rule, or whatever posts the alert)"
        )
    return (
        f"contains a lone surrogate (\\u{ord(found.group()):04x}), which is not Unicode "
        "text and cannot be stored: remove it where it is set"
    )


def _unstorable_fields(
    value: Any, loc: tuple[int | str, ...] = (), found: list[str] | None = None
) -> list[str]:
    """Every text in ``value`` (a stored notification) that cannot be stored, as
    ``where what``: the values, and the label names themselves."""
    found = [] if found is None else found
    if isinstance(value, str):
        said = unstorable(value)
        if said is not None:
            found.append(f"{_path(loc)} {said}")
    elif isinstance(value, dict):
        for key, inner in value.items():
            _unstorable_fields(key, (*loc, key), found)  # the label name, named as a field
            _unstorable_fields(inner, (*loc, key), found)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            _unstorable_fields(inner, (*loc, index), found)
    return found


def check_storable(notification: Notification, *, most: int = 5) -> Notification:
    """``notification`` when every text it would store can be stored; else
    ``BadPayload`` naming each field that cannot (``groupLabels.alertname contains a NUL
    character ...``). A row that failed its INSERT would fail every notification committed
    with it, so this is asked before anything is stored."""
    problems = _unstorable_fields(notification.stored())
    if not problems:
        return notification
    more = len(problems) - most
    raise BadPayload("; ".join(problems[:most]) + (f"; and {more} more" if more > 0 else ""))


Time = Annotated[datetime | None, BeforeValidator(parse_time)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Name = Annotated[str, Field(max_length=200)]
Labels = Annotated[dict[Name, Text], Field(max_length=MAX_LABELS)]


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
    receiver: Name
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
        raise BadPayload(_not_json(body, exc)) from None
    if not isinstance(data, dict):
        raise BadPayload("the body must be a JSON object (Alertmanager's webhook payload)")
    try:
        notification = Notification.model_validate(data)
    except ValidationError as exc:
        raise BadPayload(describe(exc)) from None
    if b"\\u0000" in body:  # JSON can hold a NUL only so written (a lone surrogate: not at all)
        check_storable(notification)
    return notification


def _not_json(body: bytes, exc: orjson.JSONDecodeError, *, most: int = 5) -> str:
    """Why ``body`` is refused. orjson refuses a lone surrogate (``"\\ud800"``) as not
    JSON; the standard library reads it, so the fields holding one can be named."""
    try:
        problems = _unstorable_fields(json.loads(body))
    except (ValueError, RecursionError):
        problems = []
    if not problems:
        return f"the body is not JSON: {exc}"
    more = len(problems) - most
    return "; ".join(problems[:most]) + (f"; and {more} more" if more > 0 else "")


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _path(loc: tuple[int | str, ...]) -> str:
    """``('alerts', 0, 'labels', 'alertname')`` as ``alerts[0].labels.alertname``; a key
    that is not a plain name is quoted as JSON (``labels["a.b"]``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "(top level)"


def describe(exc: ValidationError, *, most: int = 5) -> str:
    """The first few problems, each with where it is (``alerts[0].startsAt: ...``)."""
    problems = []
    for err in exc.errors(include_url=False)[:most]:
        loc = tuple(err["loc"])
        if loc[-1:] == ("[key]",):  # the label name itself is wrong: name it as the field
            loc = loc[:-1]
        where = _path(loc)
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            message = "required"
        elif err["type"] == "literal_error" and where == "version":
            message = 'expected "4" (Alertmanager\'s webhook version)'
        problems.append(f"{where}: {message}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")


def from_stored(data: dict[str, Any]) -> Notification:
    """A notification as the inbox keeps it; raises ``ValidationError`` or ``BadPayload``
    for one that is not a notification queuebot could store (stored by an older
    queuebot, or by hand)."""
    return check_storable(Notification.model_validate(data, strict=False))
