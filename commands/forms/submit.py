"""A form submitted: each value checked as its flag is, by the parser's own converters,
then the whole as the command typed; the text it makes, or an error per field."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from commands.forms.model import FORMS, Submitted, spec_of
from commands.parser import MAX_VALUE, check_positional, convert_value, plain_text, read
from commands.spec import CommandSpec, Flag
from services.errors import UsageError

_LINK = re.compile(r"https?://\S+")  # the model's own rule for --evidence


def submitted(kind: str, target: int | None, values: Mapping[str, str]) -> Submitted:
    """The command a form's values make, as it would have been typed (after /group), each
    value checked as its flag is; or an error per field, saying what is right."""
    spec = spec_of(kind)
    errors: dict[str, str] = {}
    given = {k: plain_text(str(v)).strip() for k, v in values.items() if v is not None}

    def flag_value(name: str, flag: Flag, *, required: bool = False) -> str | None:
        raw = given.get(name, "")
        if not raw:
            if required:
                errors[name] = _required(name, flag)
            return None
        try:
            convert_value(spec, flag, raw)
        except UsageError as exc:
            errors[name] = _plain(exc.message, flag.name)
            return None
        if name == "evidence" and not _LINK.fullmatch(raw):
            errors[name] = (
                "a link starting with https:// (the deploy, PR or dashboard showing the "
                f"fix is in place), not {raw[:40]!r}"
            )
            return None
        return f"--{flag.name} {shlex.quote(raw)}"

    parts = [kind]
    if kind == "declare":
        parts += _declaration(spec, given, errors)
        queue = spec.flag("queue")
        assert queue is not None
        parts.append(flag_value("queue", queue) or "")
        if target is not None:
            parts.append(f"--from-alert {target}")
    else:
        parts.append(_target_words(kind, target, given, errors))
        reason = spec.flag("reason")
        assert reason is not None
        parts.append(flag_value("reason", reason, required=kind != "reject") or "")
        if kind == "resolve":
            parts.append("--override")
        if kind == "redrive":
            for name in ("evidence", "incident"):
                flag = spec.flag(name)
                assert flag is not None
                parts.append(flag_value(name, flag) or "")
    text = " ".join(p for p in parts if p)
    if not errors:
        try:
            read(FORMS[kind], text)
        except UsageError as exc:
            name = _field_named(kind, exc.message)
            errors[name] = _plain(exc.message, name)
    return Submitted(None if errors else text, errors)


def _declaration(spec: CommandSpec, given: Mapping[str, str], errors: dict[str, str]) -> list[str]:
    scenario, summary = given.get("scenario", ""), given.get("summary", "")
    position = spec.positionals[0]
    if not scenario:
        errors["scenario"] = "choose the scenario: its runbook is what will run"
    else:
        try:
            check_positional(spec, position, scenario)
        except UsageError as exc:
            errors["scenario"] = exc.message
    if len(summary) < 3 or len(summary) > MAX_VALUE:
        errors["summary"] = f"say what happened in 3 to {MAX_VALUE} characters"
    return [shlex.quote(scenario), shlex.quote(summary)]


def _target_words(
    kind: str, target: int | None, given: Mapping[str, str], errors: dict[str, str]
) -> str:
    if kind == "redrive":
        selection = given.get("selection", "")
        if not selection:
            errors["selection"] = (
                "name the jobs (their ids) or select dead letters: --error-like TEXT, "
                "--tenant T, --failure-reason R, --job-type T, --args-like TEXT, "
                "--from-plan P-N or --all"
            )
        return selection
    if kind == "reject":
        return f"CR-{target}"
    if kind == "resolve":
        return f"INC-{target}" if target else ""
    return f"P-{target}"


# the field a parser's complaint names (the first flag it names, or the model field it
# starts with), else the form's main one
_FIELDS = {"redrive": ("reason", "evidence", "incident"), "declare": ("queue",)}
_MAIN = {"redrive": "selection", "declare": "summary"}
_FIRST_FLAG = re.compile(r"--([a-z][a-z-]*)")


def _field_named(kind: str, message: str) -> str:
    fields = _FIELDS.get(kind, ("reason",))
    first = _FIRST_FLAG.search(message)
    named = first[1] if first else message.partition(":")[0]
    if named in fields and "given twice" not in message:  # twice: typed in the selection too
        return named
    if kind == "declare" and ("SCENARIO" in message or "scenario" in message):
        return "scenario"
    return _MAIN.get(kind, "reason")


def _plain(message: str, name: str) -> str:
    """A parser's words without the flag they start with (the field shows its own label)."""
    for prefix in (f"--{name}: ", f"{name}: ", f"--{name} "):
        if message.startswith(prefix):
            message = message.removeprefix(prefix).removeprefix("is ")  # "is longer than"
            return message[:1].upper() + message[1:]
    return message


def _required(name: str, flag: Flag) -> str:
    if name == "reason":
        return (
            "say why, in 3 to 500 characters: the root cause and the fix (kept in the audit trail)"
        )
    return f"--{flag.name} is required"
