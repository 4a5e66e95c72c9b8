"""Canonical JSON: the form snapshots and audit events are stored and hashed in,
identical on SQLite and PostgreSQL.

orjson does the work: a redrive of ten thousand jobs snapshots megabytes of rows, and the
standard library's encoder would dominate it. Keys are sorted, naive datetimes are UTC.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

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


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)


def jsonable(value: Any) -> Any:
    """The value as plain JSON types (dicts with str keys, lists, str, numbers, None)."""
    return orjson.loads(dumps_bytes(value))


def canonical(value: Any) -> str:
    return dumps(value, sort_keys=True)


def digest(value: Any) -> str:
    return hashlib.sha256(dumps_bytes(value, sort_keys=True)).hexdigest()


def raw_json(text: str) -> Any:
    """JSON text the database already produced, embedded as-is when dumped (no parsing,
    no re-encoding): the cheap way to carry ten thousand row snapshots."""
    return orjson.Fragment(text)
