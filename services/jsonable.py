"""Canonical JSON: the form snapshots and audit events are stored and hashed in,
identical on SQLite and PostgreSQL.

orjson does the work: a redrive of ten thousand jobs snapshots megabytes of rows, and the
standard library's encoder would dominate it. Keys are sorted, naive datetimes are UTC.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from decimal import Decimal
from typing import Any, Protocol

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_NAIVE_UTC


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def dumps_bytes(value: Any, *, sort_keys: bool = False) -> bytes:
    options = _OPTIONS | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    return orjson.dumps(value, default=_default, option=options)


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    return dumps_bytes(value, sort_keys=sort_keys).decode("utf-8")


_LARGE_DOCUMENT = 1 << 20
_INT64 = (-(1 << 63), (1 << 64) - 1)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number is infinity when parsed as double: {text}")
    return value


def _integer(text: str) -> int | float:
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else float(value)


def loads(text: str | bytes) -> Any:
    """Parse JSON. A document over a megabyte (a large change request's targets) goes to
    the standard library's parser: orjson sets aside several times a document's size
    while it parses (360 MB for 23 MB of targets), the standard library only what the
    values need (80 MB), taking about 1.4 times as long. Both read numbers alike: NaN,
    Infinity and numbers too large for a double are refused, integers beyond 64 bits
    become floats."""
    if len(text) > _LARGE_DOCUMENT:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer
        )
    return orjson.loads(text)


def jsonable(value: Any) -> Any:
    """The value as plain JSON types (dicts with str keys, lists, str, numbers, None)."""
    return orjson.loads(dumps_bytes(value))


def canonical(value: Any) -> str:
    return dumps(value, sort_keys=True)


def digest(value: Any) -> str:
    return hashlib.sha256(dumps_bytes(value, sort_keys=True)).hexdigest()


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


LARGE_TEXT = 1 << 16  # a text value longer than this is escaped piece by piece
_PIECE = 1 << 20


def update_canonical(
    h: _Digest, value: dict[str, Any], *, piece: int = _PIECE, large: int = LARGE_TEXT
) -> None:
    """Feed ``h`` (a hashlib or hmac object) exactly the bytes of ``canonical(value)``.

    orjson sets aside several times a string's length to escape it, so hashing an audit
    event whose details are a 100 MB text took a gigabyte at once. Here each text value
    over ``large`` characters is left out of the serialized object (a marker stands
    in for it) and fed in pieces, each escaped on its own: JSON escapes character by
    character, so the pieces escaped one by one are the whole text escaped."""
    texts = {k: v for k, v in value.items() if isinstance(v, str) and len(v) > large}
    if not texts:
        h.update(dumps_bytes(value, sort_keys=True))
        return
    token = secrets.token_hex(16)
    marks = {k: f"qb-large-text-{n}-{token}" for n, k in enumerate(texts)}
    framed = dumps_bytes({**value, **marks}, sort_keys=True)
    spots = sorted((framed.index(dumps_bytes(mark)), k) for k, mark in marks.items())
    at = 0
    for start, key in spots:
        h.update(framed[at:start])
        h.update(b'"')
        text = texts[key]
        for i in range(0, len(text), piece):
            h.update(dumps_bytes(text[i : i + piece])[1:-1])
        h.update(b'"')
        at = start + len(dumps_bytes(marks[key]))
    h.update(framed[at:])


def raw_json(text: str) -> Any:
    """JSON text the database already produced, embedded as-is when dumped (no parsing,
    no re-encoding): the cheap way to carry ten thousand row snapshots."""
    return orjson.Fragment(text)
