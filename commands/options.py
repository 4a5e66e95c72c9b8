"""Typed options (Discord's app commands) to typed commands.

The same catalogue as the free-text parser: each positional and each flag of a command is
one option, named as the flag is spelled (``error-like``) or, for a positional, by its
field (``ids``, ``job-id``). Values are checked as typed text is, so an option refused
here is refused with the same words in Slack and the console. Several job ids arrive in
one text option, separated by spaces or commas.

Never raises anything but ``UsageError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from commands.catalog import find_spec
from commands.model import Command, Help
from commands.parser import build_command, check_positional, convert_value
from commands.spec import CommandSpec, Flag, Positional
from services.errors import UsageError

_SEPARATORS = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class Option:
    """One option of a command: what it fills, and how it is typed."""

    name: str  # as Discord shows it: lower-case, "-" between words
    required: bool
    flag: Flag | None = None
    positional: Positional | None = None

    @property
    def parameter(self) -> str:
        """A Python identifier for the option (discord.py reads options from a signature)."""
        return self.name.replace("-", "_")


def options_of(spec: CommandSpec) -> list[Option]:
    """The options of a command, positionals first, in the catalogue's order."""
    found = [
        Option(name=p.field.replace("_", "-"), required=p.required, positional=p)
        for p in spec.positionals
    ]
    found += [Option(name=f.name, required=f.required, flag=f) for f in spec.flags]
    return found


def from_options(group: str, name: str, values: Mapping[str, Any]) -> Command:
    """The command ``/group name`` with these option values (by option name; options not
    given are absent or None)."""
    spec = find_spec(group, name)
    if spec is None:
        raise UsageError(f"unknown command /{group} {name}", usage=f"/{group} help")
    fields = fields_of(spec, values)
    if spec.model is Help:
        fields["group"] = group
    return build_command(spec, fields)


def fields_of(
    spec: CommandSpec, values: Mapping[str, Any], *, lenient: bool = False
) -> dict[str, Any]:
    """The command's field values from its option values, each checked; a required one
    missing is refused, unless ``lenient`` (a form asks for it)."""
    known = {o.name: o for o in options_of(spec)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r} for {spec.path}", usage=spec.usage)
    fields: dict[str, Any] = {}
    for option in known.values():
        value = values.get(option.name)
        if value is None or value == "":
            if option.required and not lenient:
                raise UsageError(f"{spec.path} needs {option.name}", usage=spec.usage)
            continue
        fields.update(_field(spec, option, value))
    return fields


def _field(spec: CommandSpec, option: Option, value: Any) -> dict[str, Any]:
    if option.positional is not None:
        pos = option.positional
        if pos.many:
            tokens = [t for t in _SEPARATORS.split(str(value)) if t]
            if not tokens:
                raise UsageError(f"{spec.path} needs {pos.metavar}", usage=spec.usage)
            return {pos.field: [check_positional(spec, pos, t) for t in tokens]}
        if pos.kind == "text":
            return {pos.field: str(value)}
        return {pos.field: check_positional(spec, pos, str(value).strip())}
    flag = option.flag
    assert flag is not None
    if flag.kind == "bool":
        return {flag.field: True} if value is True else {}
    return {flag.field: convert_value(spec, flag, str(value))}
