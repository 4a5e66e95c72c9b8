"""A form as the platforms draw it: its kind (the command it completes), its fields and
what they hold; what a submission makes; the words where a form could not open."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from commands.catalog import find_spec
from commands.parser import MAX_VALUE
from commands.reply import Reply
from commands.spec import CommandSpec
from services.message import Message, Text

# Each form's command: /queue or /incident, and its name
FORMS: dict[str, str] = {
    "redrive": "queue",
    "reject": "queue",
    "resume": "queue",
    "rollback": "queue",
    "declare": "incident",
    "resolve": "incident",
}

FieldKind = Literal["line", "paragraph", "url", "choice"]


@dataclass(frozen=True)
class Choice:
    value: str
    label: str


@dataclass(frozen=True)
class FormField:
    """One field: ``name`` is its id (the flag it fills: reason, evidence, incident,
    queue; or selection, scenario, summary)."""

    name: str
    label: str
    kind: FieldKind = "line"
    initial: str | None = None
    options: tuple[Choice, ...] = ()
    required: bool = True
    max_length: int = MAX_VALUE
    hint: str = ""


@dataclass(frozen=True)
class Form:
    kind: str  # one of FORMS: the command it completes
    title: str
    submit: str
    fields: tuple[FormField, ...]
    target: int | None = None  # CR-N, P-N, INC-N, or the alert group it declares from

    @property
    def group(self) -> str:
        return FORMS[self.kind]

    def refilled(self, values: Mapping[str, str]) -> Form:
        """The same form holding what was typed in it (to open it again)."""
        return replace(
            self,
            fields=tuple(replace(f, initial=values.get(f.name) or f.initial) for f in self.fields),
        )


@dataclass(frozen=True)
class Submitted:
    """A form's values as the command typed (``text``, after /group), or what is wrong,
    by field."""

    text: str | None
    errors: dict[str, str]


def spec_of(kind: str) -> CommandSpec:
    spec = find_spec(FORMS[kind], kind)
    assert spec is not None
    return spec


def typed_instead(form: Form) -> str:
    """The command to type whole where the form could not open: what it holds already,
    and what it would have asked for."""
    held = {f.name: f.initial for f in form.fields}
    if form.kind == "declare":
        scenario = held.get("scenario") or "SCENARIO"
        queue = f" --queue {held['queue']}" if held.get("queue") else ""
        alert = f" --from-alert {form.target}" if form.target else ""
        return f'/incident declare {scenario} "SUMMARY"{queue}{alert}'
    target = {
        "redrive": held.get("selection") or "ID...",
        "reject": f"CR-{form.target}",
        "resume": f"P-{form.target}",
        "rollback": f"P-{form.target}",
        "resolve": (f"INC-{form.target} " if form.target else "") + "--override",
    }[form.kind]
    return f'/{form.group} {form.kind} {target} --reason "WHY"'


def not_opened(form: Form, problem: str) -> Reply:
    """What a person reads where their form could not open: in words, never silence."""
    why = (
        "could not open in time (a form must open within 3 seconds of the command)"
        if problem in ("expired_trigger_id", "exchanged_trigger_id")
        else f"could not open ({problem})"
    )
    text = (
        f"The form for /{form.group} {form.kind} {why}, so nothing was done. Run the "
        f"command again, or type it whole: {typed_instead(form)}"
    )
    return Reply(Message(text, (Text(text),)), error=True)
