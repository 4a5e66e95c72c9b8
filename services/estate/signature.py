"""Failure signatures: an error text with its variable parts (ids, numbers) taken out.

Two failures with the same signature almost always share a cause, so triage and redrive
group by it. The same rules run in Python (SQLite, through a registered function) and as
a ``regexp_replace`` chain on PostgreSQL; tests check they agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from sqlalchemy import event, func
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

SIGNATURE_LENGTH = 120
SIGNATURE_SAMPLE = 2000  # triage groups the newest this many dead rows by signature
NO_ERROR = "(no error recorded)"

# (POSIX/ARE pattern usable by both PostgreSQL and Python, replacement)
RULES: tuple[tuple[str, str], ...] = (
    (r"[A-Za-z][A-Za-z0-9+.-]*://[^ \t\r\n]+", "<url>"),
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<uuid>"),
    (r"0x[0-9a-fA-F]+", "<hex>"),
    (r"(?<![A-Za-z0-9])[0-9]+", "<n>"),
    (r"[ \t\r\n]+", " "),
)
# What a text must contain for each rule to change it: a cheap test that skips a rule
# which cannot match (the URL rule alone was a third of the time on typical errors).
_NEEDS: tuple[Callable[[str], bool], ...] = (
    lambda t: "://" in t,
    lambda t: "-" in t,
    lambda t: "0x" in t,
    lambda t: True,
    lambda t: "  " in t or "\t" in t or "\n" in t or "\r" in t,
)
_COMPILED = tuple(
    (re.compile(pattern), replacement, needs)
    for (pattern, replacement), needs in zip(RULES, _NEEDS, strict=True)
)


def error_signature(text: str | None) -> str | None:
    """The signature of one error text (None stays None).

    Dead letters share their errors (ten thousand rows of one incident carry a few dozen
    texts), so the signatures of texts up to ``_CACHED_LENGTH`` are kept (at most
    ``_CACHED`` of them, about 2.5 MB): a freeze of ten thousand rows then runs the rules
    a few dozen times, not fifty thousand. Longer texts, rarely repeated, are not kept."""
    if text is None:
        return None
    if len(text) <= _CACHED_LENGTH:
        return _cached_signature(text)
    return _signature(text)


_CACHED = 4096
_CACHED_LENGTH = 512


def _signature(text: str) -> str:
    for pattern, replacement, needs in _COMPILED:
        if needs(text):
            text = pattern.sub(replacement, text)
    return text.strip(" ")[:SIGNATURE_LENGTH].rstrip(" ")


_cached_signature = lru_cache(maxsize=_CACHED)(_signature)


def signature_sql(column: ColumnElement[str], dialect: str) -> ColumnElement[str]:
    """A SQL expression computing ``error_signature(column)`` on the given dialect."""
    if dialect != "postgresql":
        return func.qb_signature(column)
    expr: ColumnElement[str] = column
    for pattern, replacement in RULES:
        expr = func.regexp_replace(expr, pattern, replacement, "g")
    return func.rtrim(func.left(func.btrim(expr, " "), SIGNATURE_LENGTH), " ")


def install_sql_functions(engine: AsyncEngine) -> None:
    """Give SQLite connections of ``engine`` the ``qb_signature`` function that
    ``signature_sql`` calls there (PostgreSQL needs nothing). Registered on the engine for
    every checkout, so connections the pool made before the estate was given the engine
    get it too, and so do those of a pool the engine makes anew (after a dispose)."""
    if engine.dialect.name != "sqlite":
        return
    target = engine.sync_engine
    if not event.contains(target, "checkout", _register_signature):
        event.listen(target, "checkout", _register_signature)


def _register_signature(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    if record.info.get("qb_signature"):
        return
    dbapi_conn.create_function("qb_signature", 1, error_signature, deterministic=True)
    record.info["qb_signature"] = True


def display_signature(signature: str | None) -> str:
    return NO_ERROR if signature is None or signature == "" else signature
