"""Rules between a statement's fields. They read the raw JSON, so that they are checked
(and reported) beside the fields' own problems: a value of the wrong shape is left to the
field's check and skipped here.

**Known dependencies.** A dependency is known to a statement when

- the statement relies on it or reaches someone over it: it is named in ``assumes``, an
  authority's ``reachableOver``, a communication's ``channelDependencyId``, a secret's
  ``heldInDependencyId`` or ``recoveryInfrastructureDependencyId``;
- the statement lists it in ``dependencies`` (queuebot's addition, for what is only
  restored); or
- it is one of queuebot's own (``QUEUEBOT_DEPENDENCIES``): every estate queuebot runs
  on has a job queue, workers draining it, the database holding it and a chat channel.

Every dependency in ``restoreOrder`` must be known, appear once, and not be one the
statement assumes healthy (what is assumed healthy is not restored).

**Holding redrives.** ``blocksRedrivesUntil`` names a step of ``restoreOrder``: an open
incident holds redrives on its queue until that step is marked done, so a step the runbook
never restores would hold them until the incident is resolved.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from services.runbooks.problems import Problem
from services.runbooks.statement import DEPENDENCY_ID

QUEUEBOT_DEPENDENCIES: dict[str, str] = {
    "dep:job-queue": "the queue: its tables and whatever hands their rows to workers",
    "dep:job-worker-pool": "the workers that take jobs from the queue",
    "dep:primary-store": "the database holding the queue's tables",
    "dep:notification-channel": "the chat channels people are told things over",
}


def _items(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    return value if isinstance(value, list) else []


def _dep(value: Any) -> str | None:
    return value if isinstance(value, str) and DEPENDENCY_ID.match(value) else None


def _referenced(data: Mapping[str, Any]) -> Iterator[Any]:
    yield from _items(data, "assumes")
    yield from _items(data, "dependencies")
    yield data.get("recoveryInfrastructureDependencyId")
    for key in ("detectionAuthority", "declarationAuthority"):
        authority = data.get(key)
        if isinstance(authority, dict):
            yield from _items(authority, "reachableOver")
    for item in _items(data, "communications"):
        if isinstance(item, dict):
            yield item.get("channelDependencyId")
    for item in _items(data, "secrets"):
        if isinstance(item, dict):
            yield item.get("heldInDependencyId")


def known_dependencies(data: Mapping[str, Any]) -> set[str]:
    """The dependencies a statement may restore (see the module's description)."""
    named = {dep for dep in map(_dep, _referenced(data)) if dep is not None}
    return named | set(QUEUEBOT_DEPENDENCIES)


def rule_problems(data: Mapping[str, Any]) -> list[Problem]:
    return [
        *_restore_order(data),
        *_fencing(data),
        *_redrives_held_until(data),
        *_repeats(data, "secrets", ("id",)),
        # one communication per audience: an incident keeps one deadline per audience
        *_repeats(data, "communications", ("audience",)),
        *_repeated_ids(data, "dependencies"),
    ]


def _restore_order(data: Mapping[str, Any]) -> Iterator[Problem]:
    known = known_dependencies(data)
    assumed = {dep for dep in map(_dep, _items(data, "assumes")) if dep is not None}
    first: dict[str, int] = {}
    for index, value in enumerate(_items(data, "restoreOrder")):
        dep = _dep(value)
        if dep is None:
            continue  # the field's own check says what is wrong with it
        path = ("restoreOrder", index)
        if dep in first:
            yield Problem(
                f"{dep!r} repeats restoreOrder[{first[dep]}]; each dependency is restored once",
                path,
            )
            continue
        first[dep] = index
        if dep in assumed:
            yield Problem(
                f"{dep!r} is in assumes (taken to be healthy), so it is not restored here; "
                "take it out of one of the two",
                path,
            )
        elif dep not in known:
            yield Problem(
                f"{dep!r} is not a known dependency (known: {', '.join(sorted(known))}); "
                "name it in dependencies if this runbook restores it",
                path,
            )


def _fencing(data: Mapping[str, Any]) -> Iterator[Problem]:
    if data.get("promotesAStandby") is True and "fencing" in data and data["fencing"] is None:
        yield Problem(
            "must say how the old primary is kept from writing, because promotesAStandby is true",
            ("fencing",),
        )


def _redrives_held_until(data: Mapping[str, Any]) -> Iterator[Problem]:
    dep = _dep(data.get("blocksRedrivesUntil"))
    if dep is None or not isinstance(data.get("restoreOrder"), list):
        return  # left out, null, or of the wrong shape: the fields' own checks say so
    order = [d for d in map(_dep, _items(data, "restoreOrder")) if d is not None]
    if dep not in order:
        yield Problem(
            f"{dep!r} is not in restoreOrder ({', '.join(order) or 'empty'}): name the "
            "restore step after which redrives may run again, or leave the field out",
            ("blocksRedrivesUntil",),
        )


def _repeats(data: Mapping[str, Any], key: str, fields: tuple[str, ...]) -> Iterator[Problem]:
    first: dict[tuple[Any, ...], int] = {}
    for index, item in enumerate(_items(data, key)):
        if not isinstance(item, dict):
            continue
        values = tuple(item.get(f) for f in fields)
        if not all(isinstance(v, str) for v in values):
            continue
        if values in first:
            said = " and ".join(f"{f} {v!r}" for f, v in zip(fields, values, strict=True))
            yield Problem(f"repeats {key}[{first[values]}] ({said})", (key, index))
        else:
            first[values] = index


def _repeated_ids(data: Mapping[str, Any], key: str) -> Iterator[Problem]:
    first: dict[str, int] = {}
    for index, value in enumerate(_items(data, key)):
        if isinstance(value, str) and value in first:
            yield Problem(f"{value!r} repeats {key}[{first[value]}]", (key, index))
        elif isinstance(value, str):
            first[value] = index
