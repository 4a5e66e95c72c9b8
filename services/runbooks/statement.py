"""The runbook statement: the machine-checkable JSON a runbook file carries after its
marker, as typed data.

Field names are camelCase, as in the file. Values are taken as written, never coerced:
``"withinMs": "300000"`` is refused, not read as a number. A field this model does not
name is refused (a misspelt ``withinMS`` must not pass as an unknown extra). The base
fields are all required, nullable ones included (``"fencing": null`` says there is none);
queuebot's own additions are optional: a ``draft`` per communication, a ``check`` per
validation item (which may also be a plain sentence), a top-level ``dependencies`` list and
``blocksRedrivesUntil`` (the restore step an open incident holds redrives on its queue
until).
Rules that relate one field to another (which dependencies are known, repeats) live in
``services/runbooks/rules.py``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from services.runbooks.problems import shown

DEPENDENCY_ID = re.compile(r"^dep:[a-z0-9][a-z0-9._-]{0,62}\Z")
RUNBOOK_ID = re.compile(r"^runbook:[a-z0-9][a-z0-9._-]{0,62}\Z")
# Incidents keep the scenario in a column of 64 characters.
SCENARIO_ID = re.compile(r"^[a-z][a-z0-9-]{0,15}:[a-z0-9][a-z0-9._-]{0,46}\Z")
AUDIENCE = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")  # as a [channels.NAME] is named
MAX_TEXT = 2000
MAX_WINDOW = timedelta(days=7)

# What a communication's draft may say in braces, and what each is filled with.
PLACEHOLDERS: dict[str, str] = {
    "incident": "the incident's number, such as INC-4",
    "lead": "who declared the incident and leads it",
    "queue": "the queue it concerns",
    "summary": "the one-line summary given when it was declared, ending as a sentence",
    "scenario": "the scenario id, such as gd:queue-loss",
}

CheckId = Literal[
    "count-restored",
    "backlog-falling",
    "synthetic-job",
    "redriven-succeeded",
    "dead-letters-low",
    "dead-letters-not-growing",
]
CHECKS: dict[str, str] = {
    "count-restored": "the queue holds the job count written down before the stop",
    "backlog-falling": "the pending backlog falls rather than holding steady, or is drained "
    "(where the incident put rows back: back where it stood before)",
    "synthetic-job": "a job submitted after recovery reaches a terminal state",
    "redriven-succeeded": "every job redriven under the incident succeeded, none dead again",
    "dead-letters-low": "the failed rows with an actionable reason are at or below the "
    "FailedJobsAccumulating alert's threshold; on a queue without failure reasons, the dead "
    "letters fell by at least what was redriven",
    "dead-letters-not-growing": "no row died since the incident's first redrive, but jobs "
    "queuebot redrove that died again",
}


def _refuse(kind: str, message: str, value: object) -> PydanticCustomError:
    return PydanticCustomError(kind, message + ", got {got}", {"got": shown(value)})


def _text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be empty")
    if len(value) > MAX_TEXT:
        raise PydanticCustomError("too_long", f"must be at most {MAX_TEXT} characters")
    return value


def _matching(regex: re.Pattern[str], expected: str) -> Any:
    def check(value: str) -> str:
        if not regex.match(value):
            raise _refuse("pattern", f"must be {expected}", value)
        return value

    return AfterValidator(check)


def _milliseconds(value: object) -> int:
    if type(value) is not int or value <= 0:
        raise _refuse("milliseconds", "must be a positive number of milliseconds", value)
    if value > MAX_WINDOW / timedelta(milliseconds=1):
        raise _refuse("milliseconds", "must be at most 7 days (604800000 ms)", value)
    return value


def _fencing(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    raise _refuse(
        "fencing",
        "must be null (nothing is promoted, so nothing needs fencing off) or a sentence "
        "saying how the old primary is kept from writing",
        value,
    )


def draft_problem(draft: str) -> str | None:
    """What is wrong with a draft's placeholders, or None. A placeholder is a name from
    ``PLACEHOLDERS`` in braces, with nothing else inside; ``{{`` and ``}}`` are braces."""
    allowed = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
    try:
        parts = list(string.Formatter().parse(draft))
    except ValueError:
        return (
            "has an unmatched brace; write {{ or }} for a brace itself "
            f"(placeholders: {allowed})"
        )
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            conv = f"!{conversion}" if conversion else ""
            written = "{" + name + conv + (f":{spec}" if spec else "") + "}"
            return f"unknown placeholder {written} (allowed: {allowed})"
    return None


def _draft(value: str) -> str:
    problem = draft_problem(value)
    if problem is not None:
        raise PydanticCustomError("draft", problem)
    return value


def say_window(ms: int) -> str:
    seconds, rest = divmod(ms, 1000)
    if rest:
        return f"{ms} ms"
    minutes, secs = divmod(seconds, 60)
    if secs:
        return f"{seconds} s"
    hours, mins = divmod(minutes, 60)
    if not hours:
        return f"{mins} min"
    return f"{hours} h" + (f" {mins} min" if mins else "")


def as_sentence(text: str) -> str:
    """``text`` ending as a sentence: a full stop added where it ends without one (or a
    ``!`` or ``?``), so what a draft says after it does not run on from it."""
    said = text.strip()
    return said if not said or said.endswith((".", "!", "?", "…")) else said + "."


def fill_draft(draft: str, values: Mapping[str, str]) -> str:
    """A draft with its placeholders filled; one without a value reads ``-``. The summary
    ends as a sentence (``as_sentence``)."""
    filled = {name: values.get(name, "-") for name in PLACEHOLDERS}
    if "summary" in values:
        filled["summary"] = as_sentence(values["summary"])
    return draft.format_map(filled)


Text = Annotated[str, AfterValidator(_text)]
DependencyId = Annotated[str, _matching(DEPENDENCY_ID, "a dependency id such as dep:job-queue")]
Milliseconds = Annotated[int, PlainValidator(_milliseconds)]
Fencing = Annotated[str | None, PlainValidator(_fencing)]
Draft = Annotated[str, AfterValidator(_text), AfterValidator(_draft)]


class _Part(BaseModel):
    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class Authority(_Part):
    """Who detects or declares: a role (what queuebot maps to its own roles under
    [roles]), the name of whoever holds it, and what they are reached over."""

    role: Text
    name: Text
    reachable_over: list[DependencyId]


class Communication(_Part):
    audience: Annotated[
        str,
        _matching(AUDIENCE, "a short lower-case name such as operators (letters, digits, - or _)"),
    ]
    channel_dependency_id: DependencyId
    within_ms: Milliseconds
    draft: Draft | None = None  # queuebot's: the message to send, with placeholders

    @property
    def within(self) -> timedelta:
        return timedelta(milliseconds=self.within_ms)

    @property
    def window(self) -> str:
        """``within`` for people: "5 min", "1 h", "1 h 30 min", "90 s"."""
        return say_window(self.within_ms)


class Secret(_Part):
    id: Text
    held_in_dependency_id: DependencyId
    recoverable_out_of_band: bool


class ValidationItem(_Part):
    """A check that recovery worked: a sentence, and (queuebot's) the id of a check
    queuebot can run for it. In the file, a plain string is a sentence without a check."""

    text: Text
    check: CheckId | None = None

    @model_validator(mode="before")
    @classmethod
    def _sentence(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"text": value}
        if not isinstance(value, dict):
            raise _refuse(
                "validation_item",
                'must be a sentence or an object {"text": ..., "check": ...}',
                value,
            )
        return value


class Statement(_Part):
    id: Annotated[str, _matching(RUNBOOK_ID, "an id such as runbook:queue-loss")]
    scenario_id: Annotated[
        str, _matching(SCENARIO_ID, "a scenario id such as gd:queue-loss (at most 64 characters)")
    ]
    version: Annotated[Text, Field(max_length=40)]
    detection_authority: Authority
    declaration_authority: Authority
    communications: Annotated[list[Communication], Field(min_length=1)]
    assumes: list[DependencyId]
    recovery_infrastructure_dependency_id: DependencyId | None
    secrets: list[Secret]
    restore_order: list[DependencyId]
    fencing: Fencing
    promotes_a_standby: bool
    validation: Annotated[list[ValidationItem], Field(min_length=1)]
    failback: Text
    dependencies: list[DependencyId] = Field(default_factory=list)  # queuebot's
    # queuebot's: an open incident of this runbook holds redrives on its queue until this
    # restore step is done (rules.py holds it to restoreOrder); None: it holds none
    blocks_redrives_until: DependencyId | None = None


# The object each field name leads into, to name the fields a misspelt one may have meant.
PARTS: dict[str, type[_Part]] = {
    "detectionAuthority": Authority,
    "declarationAuthority": Authority,
    "communications": Communication,
    "secrets": Secret,
    "validation": ValidationItem,
}
# What to write when a nullable field is left out.
NULLABLE_HINTS: dict[str, str] = {
    "fencing": "write null when nothing is promoted",
    "recoveryInfrastructureDependencyId": "write null when recovery happens in place",
}
