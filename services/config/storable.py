"""Every string of the configuration file, checked once for what the databases can keep
before any model sees it: a value (or a key) of queuebot.toml may end up in a bound
parameter of a query (a queue name, a status value, a label) or in one of queuebot's own
rows, and PostgreSQL refuses a NUL character in text. TOML itself guarantees valid UTF-8
and refuses escapes of lone surrogates, so the NUL is the one character left to refuse
here; the lengths are the fields' own (each name or value stored in a column of
queuebot's has a limit no longer than the column's)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

NUL = "\x00"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def _key(part: str) -> str:
    """A key as TOML writes it: bare when it can be, quoted otherwise."""
    return part if _BARE_KEY.match(part) else json.dumps(part)


def _path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{_key(part)}" if out else _key(part)
    return out or "(top level)"


def _walk(value: Any, loc: tuple[str | int, ...], found: list[str]) -> None:
    if isinstance(value, str):
        if NUL in value:
            found.append(
                f"{_path(loc)}: contains a NUL character (\\x00), which PostgreSQL cannot "
                "store; remove it"
            )
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            if isinstance(key, str) and NUL in key:
                found.append(
                    f"{_path(loc)}: the key {json.dumps(key)} contains a NUL character "
                    "(\\x00), which PostgreSQL cannot store; rename it"
                )
                continue
            _walk(inner, (*loc, key), found)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            _walk(inner, (*loc, index), found)


def unstorable(data: Mapping[str, Any], *, most: int = 5) -> list[str]:
    """One line per string (value or key) of the parsed file that no database of
    queuebot's can keep, named by its key (``queues.billing.queue_name: contains a NUL
    character ...``); empty when every one can be kept."""
    found: list[str] = []
    _walk(data, (), found)
    if len(found) > most:
        found = [*found[:most], f"and {len(found) - most} more"]
    return found
