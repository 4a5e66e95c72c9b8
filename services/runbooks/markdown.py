"""Finding the statement in a runbook's Markdown: the marker on a line of its own, then
(past blank lines) a fenced ``json`` block, read as JSON. Everything else in the file is
prose for people; its first ``#`` heading is the runbook's title."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from services.runbooks.problems import Problem

MARKER = "<!-- oshun:runbook -->"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)\s*$")
_HEADING = re.compile(r"^ {0,3}#\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Found:
    """What a file holds: its title, and the statement's JSON (None when it could not be
    found or read), with every problem met on the way."""

    title: str | None
    data: Any = None
    problems: list[Problem] = field(default_factory=list)


def read_markdown(text: str) -> Found:
    lines = text.splitlines()
    title = _title(lines)
    markers = [n for n, line in enumerate(lines) if line.strip() == MARKER]
    if not markers:
        return Found(title, problems=[_no_marker(lines)])
    if len(markers) > 1:
        numbers = [str(n + 1) for n in markers]
        shown = ", ".join(numbers[:-1]) + f" and {numbers[-1]}"
        return Found(
            title,
            problems=[
                Problem(
                    f"holds {len(markers)} statements (markers on lines {shown}); "
                    "a file holds one runbook"
                )
            ],
        )
    block, problem = _block_after(lines, markers[0])
    if problem is not None:
        return Found(title, problems=[problem])
    assert block is not None
    data, problems = _decode(*block)
    return Found(title, data, problems)


def _title(lines: list[str]) -> str | None:
    for line in lines:
        match = _HEADING.match(line)
        if match:
            return match.group(1).replace("`", "")
    return None


def _no_marker(lines: list[str]) -> Problem:
    inline = next((n for n, line in enumerate(lines) if MARKER in line), None)
    if inline is not None:
        return Problem(
            f"the marker {MARKER} must stand on a line of its own, before the ```json block "
            "of the statement",
            line=inline + 1,
        )
    return Problem(
        f"no statement: the file has no {MARKER} marker; put it on a line of its own, "
        "followed by the statement in a ```json block"
    )


def _block_after(lines: list[str], marker: int) -> tuple[tuple[str, int] | None, Problem | None]:
    """The JSON text after the marker and the file line it starts on, or the problem."""
    n = marker + 1
    while n < len(lines) and not lines[n].strip():
        n += 1
    where = f"the marker on line {marker + 1}"
    if n == len(lines):
        return None, Problem(f"{where} is not followed by a ```json block: the file ends")
    opening = _FENCE.match(lines[n])
    if opening is None:
        said = lines[n].strip()
        said = said if len(said) <= 40 else said[:37] + "..."
        return None, Problem(
            f"{where} must be followed by a ```json block (blank lines may come between), "
            f"not {said!r}",
            line=n + 1,
        )
    fence, language = opening.groups()
    if language.lower() != "json":
        return None, Problem(
            f"the block after {where} must be marked as JSON: {fence}json", line=n + 1
        )
    for end in range(n + 1, len(lines)):
        closing = lines[end].strip()
        if set(closing) == {fence[0]} and len(closing) >= len(fence):
            return ("\n".join(lines[n + 1 : end]), n + 2), None
    return None, Problem(f"the ```json block opened on line {n + 1} is never closed", line=n + 1)


def _decode(text: str, first_line: int) -> tuple[Any, list[Problem]]:
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                repeated.append(key)
            seen[key] = value
        return seen

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        return None, [
            Problem(
                f"not valid JSON: {exc.msg}",
                line=first_line + exc.lineno - 1,
                column=exc.colno,
            )
        ]
    except ValueError as exc:
        return None, [Problem(f"not valid JSON: {exc}")]
    problems = [
        Problem(f"the key {key!r} appears twice in one object; say it once") for key in repeated
    ]
    return data, problems
