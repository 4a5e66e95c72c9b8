"""Which commands open a form, and the form each opens: what was typed already filled in,
its choices (open incidents, the runbooks the person may declare, the queues) read
through the services, after the person is authorized as the command would authorize
them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from commands.auth import holds_declaration, may_declare
from commands.catalog import find_spec
from commands.context import Invocation
from commands.forms.model import FORMS, Choice, Form, FormField, spec_of
from commands.options import fields_of
from commands.parser import MAX_VALUE, build_command, read_fields
from commands.router import Router
from commands.spec import CommandSpec
from services.errors import ConfigError, PermissionDenied, UsageError

MAX_SELECTION = 3000  # a redrive's selection: ids or filters, as typed
PLACEHOLDER_REASON = "given in the form"


def _needs(spec: CommandSpec, fields: Mapping[str, Any]) -> bool:
    if spec.name == "declare":
        return "summary" not in fields
    if spec.name == "resolve":
        return bool(fields.get("override")) and "reason" not in fields
    return "reason" not in fields


def _rest_is_right(spec: CommandSpec, fields: Mapping[str, Any]) -> bool:
    """Whether what was typed is right but for what the form asks: otherwise the command's
    own answer says what is wrong, and no form opens."""
    if spec.name == "declare":
        filled = {"scenario": "placeholder", "summary": PLACEHOLDER_REASON, **fields}
    else:
        filled = {"reason": PLACEHOLDER_REASON, **fields}
    try:
        build_command(spec, filled)
    except UsageError:
        return False
    return True


async def form_for_text(router: Router, group: str, text: str, inv: Invocation) -> Form | None:
    """The form a slash command's text opens, or None where it needs none (or is wrong
    otherwise: its own answer says so). PermissionDenied where the person may not run it."""
    try:
        spec, fields = read_fields(group, text)
    except UsageError:
        return None
    return await _form_if_needed(router, spec, fields, inv)


async def form_for_options(
    router: Router, group: str, name: str, values: Mapping[str, Any], inv: Invocation
) -> Form | None:
    """``form_for_text`` for Discord's option values."""
    spec = find_spec(group, name)
    if spec is None or FORMS.get(spec.name) != group:
        return None
    try:
        fields = fields_of(spec, values, lenient=True)
    except UsageError:
        return None
    return await _form_if_needed(router, spec, fields, inv)


async def _form_if_needed(
    router: Router, spec: CommandSpec, fields: dict[str, Any], inv: Invocation
) -> Form | None:
    if FORMS.get(spec.name) != spec.group or not _needs(spec, fields):
        return None
    if not _rest_is_right(spec, fields):
        return None
    inv = await router.admit(spec, inv)
    if spec.name == "declare":
        return await declare_form(
            router,
            inv,
            scenario=fields.get("scenario"),
            summary=fields.get("summary"),
            queue=fields.get("queue"),
            alert_group=fields.get("alert_group"),
            admitted=True,
        )
    if spec.name == "redrive":
        if len(selection_of(spec, fields)) > MAX_SELECTION:
            return None  # more ids than a field holds: the command's own answer asks
        return await _redrive(router, spec, fields)
    reason = _reason(spec, required=spec.name != "reject")
    if spec.name == "reject":
        number = int(fields["request"])
        return Form("reject", f"Reject CR-{number}", "Reject", (reason,), number)
    if spec.name == "resolve":
        raw = fields.get("incident")
        named = None if raw is None else int(str(raw).removeprefix("INC-"))
        title = f"Resolve INC-{named}" if named else "Resolve the incident"
        return Form("resolve", title, "Ask for approval", (reason,), named)
    plan = int(fields["plan"])
    title = f"{'Resume' if spec.name == 'resume' else 'Roll back'} P-{plan}"
    return Form(spec.name, title, "Ask for approval", (reason,), plan)


async def form_again(router: Router, kind: str, target: int | None, inv: Invocation) -> Form:
    """The form of ``kind`` for ``target`` once more (to show what was typed in it again),
    its choices read anew; the normal refusal where the person may no longer run it."""
    spec = spec_of(kind)
    if kind == "declare":
        return await declare_form(router, inv, alert_group=target)
    if kind == "redrive":
        await router.admit(spec, inv)
        return await _redrive(router, spec, {})
    fields: dict[str, Any] = {"override": True}
    if kind == "reject":
        fields = {"request": str(target)}
    elif kind in ("resume", "rollback"):
        fields = {"plan": str(target)}
    elif target:
        fields["incident"] = f"INC-{target}"
    form = await _form_if_needed(router, spec, fields, inv)
    assert form is not None
    return form


def form_fills(spec: CommandSpec, option: str) -> bool:
    """Whether a form asks for this option where it is not given (Discord offers it as
    optional: left out, the form opens)."""
    return FORMS.get(spec.name) == spec.group and option in ("reason", "scenario", "summary")


def _reason(spec: CommandSpec, *, required: bool) -> FormField:
    flag = spec.flag("reason")
    assert flag is not None
    return FormField(
        "reason",
        "Reason",
        "paragraph",
        required=required,
        hint=(flag.help or "why")[:100],
    )


async def _redrive(router: Router, spec: CommandSpec, fields: Mapping[str, Any]) -> Form:
    chosen = fields.get("incident")
    choices: list[Choice] = []
    if router.deps.incidents is not None:
        for view in await router.deps.incidents.open_incidents():
            label = f"{view.name} {view.scenario}: {view.summary}"
            choices.append(Choice(view.name, label if len(label) <= 75 else label[:74] + "…"))
    if chosen is not None and chosen not in {c.value for c in choices}:
        choices.insert(0, Choice(str(chosen), str(chosen)))
    parts: list[FormField] = [
        FormField(
            "selection",
            "What to redrive",
            initial=selection_of(spec, fields),
            max_length=MAX_SELECTION,
            hint="job ids, or filters: --error-like TEXT, --all ...",
        ),
        _reason(spec, required=True),
        FormField(
            "evidence",
            "Evidence (a link)",
            "url",
            initial=fields.get("evidence"),
            required=False,
            hint="the deploy, PR or dashboard showing the fix is in place",
        ),
    ]
    if choices:
        parts.append(
            FormField(
                "incident",
                "Incident",
                "choice",
                initial=chosen,
                options=tuple(choices[:25]),
                required=False,
            )
        )
    return Form("redrive", "Redrive dead letters", "Ask for approval", tuple(parts))


def selection_of(spec: CommandSpec, fields: Mapping[str, Any]) -> str:
    """What a redrive takes, as it would be typed: its ids, then its selecting flags."""
    parts = [str(i) for i in fields.get("ids", [])]
    for flag in spec.flags:
        value = fields.get(flag.field)
        if flag.field in ("reason", "evidence", "incident") or value in (None, False):
            continue
        if flag.kind == "bool":
            parts.append(f"--{flag.name}")
        elif flag.kind == "plan":
            parts.append(f"--{flag.name} P-{value}")
        else:
            parts.append(f"--{flag.name} {shlex.quote(str(value))}")
    return " ".join(parts)


async def declare_form(
    router: Router,
    inv: Invocation,
    *,
    scenario: str | None = None,
    summary: str | None = None,
    queue: str | None = None,
    alert_group: int | None = None,
    admitted: bool = False,
) -> Form:
    """The declaration form: the scenarios the person may declare, a summary, the queue;
    from an alert (``alert_group``) filled with its scenario, summary and queue. A person
    who may declare none of them (or not the scenario given) is refused as the command
    refuses them."""
    deps = router.deps
    if deps.incidents is None or deps.runbooks is None:
        raise ConfigError("this queuebot process runs no incidents (no runbooks were loaded)")
    if not admitted:
        inv = await router.admit(spec_of("declare"), inv)
    if alert_group is not None and scenario is None:
        try:
            scenario, said, from_alert = await deps.incidents.alert_context(alert_group)
        except UsageError:  # its route names no scenario: the person chooses one
            said, from_alert = None, None
        summary, queue = summary or said, queue or from_alert
    if scenario is not None:
        await may_declare(deps.runbooks.get(scenario), inv, deps)
    # filtered by the standing alone: who else holds each is not read for a form
    allowed = [r for r in deps.runbooks.all() if holds_declaration(r, inv.person, deps)]
    if not allowed:
        raise PermissionDenied(
            "you hold the declaration authority of no runbook; /incident runbooks shows "
            "who may declare each"
        )
    scenarios = [Choice(r.scenario_id, _cut(f"{r.scenario_id}: {r.title}", 75)) for r in allowed]
    queues = [Choice(q, q) for q in deps.reads.queue_names]
    fields = (
        FormField(
            "scenario", "Scenario", "choice", initial=scenario, options=tuple(scenarios[:25])
        ),
        FormField(
            "summary",
            "What happened",
            "paragraph",
            initial=_cut(summary, MAX_VALUE) if summary else None,
            hint="a line everyone told will read",
        ),
        FormField(
            "queue",
            "Queue",
            "choice",
            initial=queue,
            options=tuple(queues[:25]),
            required=False,
        ),
    )
    return Form("declare", "Declare an incident", "Declare", fields, alert_group)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
