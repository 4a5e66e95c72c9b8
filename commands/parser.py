"""Free text (Slack's command text, console lines) to typed commands.

Never raises anything but ``UsageError``, whose message says what was wrong and whose
``usage`` is the usage line of the command that was meant.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from commands.catalog import CATALOG, find_spec, group_specs
from commands.model import Command, Help
from commands.spec import CommandSpec, Flag, Positional
from services.errors import UsageError

MAX_TEXT = 4000
MAX_VALUE = 500
GROUPS = tuple(dict.fromkeys(s.group for s in CATALOG))

_SMART_QUOTES = str.maketrans(
    {
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u00ab": '"',
        "\u00bb": '"',
    }
)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z")
_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,99}\Z")
# a person: a [people] name, a Slack mention <@U…> (<@U…|name> as Slack escapes it) or a
# Discord one <@123…> (<@!123…>), or such an account's id
_PERSON = re.compile(
    r"^(?:@?[A-Za-z0-9][A-Za-z0-9_.:@-]{0,99}|<@!?[A-Za-z0-9]{2,40}(?:\|[^<>]{0,80})?>)\Z"
)
_PLAN = re.compile(r"^(?:P-?)?([0-9]{1,12})\Z", re.IGNORECASE)
_REQUEST = re.compile(r"^(?:CR-?)?([0-9]{1,12})\Z", re.IGNORECASE)
_DURATION = re.compile(r"^(?:[0-9]{1,6}[smhdw])+\Z")
_DURATION_PART = re.compile(r"([0-9]+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION = timedelta(days=366)


@dataclass(frozen=True)
class Parsed:
    """A command, and the earlier flag spellings it was written with (old, new)."""

    command: Command
    renamed: tuple[tuple[str, str], ...] = ()


def parse_line(line: str) -> Command:
    """Parse a whole line such as ``/queue dlq --limit 5`` (the leading slash is optional)."""
    return read_line(line).command


def parse(group: str, text: str) -> Command:
    """Parse the text after ``/<group>`` (what Slack sends as ``text``)."""
    return read(group, text).command


def read_line(line: str) -> Parsed:
    """``parse_line``, saying which earlier flag spellings were used."""
    _check_length(line)
    head, *tail = line.split(maxsplit=1) or [""]
    rest = tail[0] if tail else ""
    group = head.removeprefix("/").lower()
    if group not in GROUPS:
        shown = head if len(head) <= 40 else head[:40] + "..."
        raise UsageError(
            f"unknown command {shown!r}; commands start with "
            f"{' or '.join('/' + g for g in GROUPS)}",
            usage="/queue help",
        )
    return read(group, rest)


def read(group: str, text: str) -> Parsed:
    """``parse``, saying which earlier flag spellings were used."""
    _check_length(text)
    tokens = _tokenize(text, usage=f"/{group} help")
    if not tokens or tokens[0] in ("--help", "-h"):
        return Parsed(Help(group=group))
    name = tokens[0].lower()
    spec = find_spec(group, name)
    if spec is None:
        names = [s.name for s in group_specs(group)]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" Did you mean /{group} {close[0]}?" if close else ""
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise UsageError(
            f"unknown command /{group} {shown}.{hint} Commands: {', '.join(names)}.",
            usage=f"/{group} help",
        )
    if any(t in ("--help", "-h") for t in tokens[1:]):
        return Parsed(Help(topic=spec.name, group=group))
    renamed: list[tuple[str, str]] = []
    values = _bind(spec, tokens[1:], renamed)
    if spec.model is Help:
        values["group"] = group
    return Parsed(build_command(spec, values), tuple(renamed))


def build_command(spec: CommandSpec, values: dict[str, Any]) -> Command:
    """The command model from its fields' values, a model's refusal as a UsageError that
    names the option (shared by the free-text parser and Discord's typed options)."""
    try:
        return spec.model(**values)  # type: ignore[return-value]
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        flag = next((f for f in spec.flags if f.field == where), None)
        if flag is not None:
            where = f"--{flag.name}"
            if err["type"] == "string_pattern_mismatch":
                msg = f"must look like {flag.metavar}, not {_short(str(err['input']))!r}"
        raise UsageError(f"{where}: {msg}" if where else msg, usage=spec.usage) from exc


def read_fields(group: str, text: str) -> tuple[CommandSpec, dict[str, Any]]:
    """What the text gives of a command's fields, each checked as ``read`` checks it, but
    with required parts left out rather than refused (a form asks for them). Raises
    UsageError for anything else ``read`` refuses, and for help or an unknown command."""
    _check_length(text)
    tokens = _tokenize(text, usage=f"/{group} help")
    spec = find_spec(group, tokens[0].lower()) if tokens else None
    if spec is None or spec.model is Help or any(t in ("--help", "-h") for t in tokens[1:]):
        raise UsageError("not a command a form completes", usage=f"/{group} help")
    return spec, _bind(spec, tokens[1:], [], lenient=True)


def plain_text(text: str) -> str:
    """Text as the parser reads it: typographic quotes straight, no NUL."""
    return text.translate(_SMART_QUOTES).replace("\x00", "")


def _check_length(text: str) -> None:
    if len(text) > MAX_TEXT:
        raise UsageError(
            f"that message is {len(text):,} characters long; commands are limited to {MAX_TEXT:,}",
            usage="/queue help",
        )


def _tokenize(text: str, *, usage: str) -> list[str]:
    cleaned = plain_text(text)
    try:
        return shlex.split(cleaned)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise UsageError(
            f"could not read the command: {str(exc).lower()}; put text with spaces in "
            'straight double quotes, e.g. --reason "worker fixed in v2"',
            usage=usage,
        ) from exc


def _bind(
    spec: CommandSpec,
    tokens: list[str],
    renamed: list[tuple[str, str]],
    *,
    lenient: bool = False,
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    loose: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and len(token) > 2:
            name, eq, inline = token[2:].partition("=")
            flag = spec.flag(name.lower())
            if flag is None:
                raise UsageError(_unknown_flag(spec, name), usage=spec.usage)
            if name.lower() != flag.name:
                renamed.append((name.lower(), flag.name))
            if flag.field in values:
                raise UsageError(f"--{flag.name} was given twice", usage=spec.usage)
            if not flag.takes_value:
                if eq:
                    raise UsageError(f"--{flag.name} takes no value", usage=spec.usage)
                values[flag.field] = True
            else:
                if eq:
                    raw = inline
                elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    i += 1
                    raw = tokens[i]
                else:
                    raise UsageError(
                        f"--{flag.name} needs a value, e.g. --{flag.name} {flag.metavar}",
                        usage=spec.usage,
                    )
                values[flag.field] = _convert(spec, flag, raw)
        else:
            loose.append(token)
        i += 1
    values.update(_positionals(spec, loose, lenient=lenient))
    for flag in spec.flags:
        if flag.required and not lenient and flag.field not in values:
            example = f" e.g. {flag.example}" if flag.example else ""
            raise UsageError(f"--{flag.name} is required:{example}", usage=spec.usage)
    return values


def _unknown_flag(spec: CommandSpec, name: str) -> str:
    shown = name if len(name) <= 40 else name[:40] + "..."
    options = [f.name for f in spec.flags]
    close = difflib.get_close_matches(name.lower(), options, n=1)
    hint = f" Did you mean --{close[0]}?" if close else ""
    known = (
        f" Options: {', '.join('--' + o for o in options)}."
        if options
        else (" It takes no options.")
    )
    return f"unknown option --{shown} for {spec.path}.{hint}{known}"


def convert_value(spec: CommandSpec, flag: Flag, raw: str) -> Any:
    """One option's value, checked as typed text is (words, numbers, durations)."""
    return _convert(spec, flag, raw)


def check_positional(spec: CommandSpec, pos: Positional, token: str) -> str:
    """One positional value, checked as typed text is (job ids, CR-N, P-N, words)."""
    return _check_positional(spec, pos, token)


def _convert(spec: CommandSpec, flag: Flag, raw: str) -> Any:
    raw = raw.strip()
    if not raw:
        raise UsageError(f"--{flag.name} needs a non-empty value", usage=spec.usage)
    if len(raw) > MAX_VALUE:
        raise UsageError(f"--{flag.name} is longer than {MAX_VALUE} characters", usage=spec.usage)
    if flag.kind == "int":
        if not raw.isascii() or not raw.isdigit():
            raise UsageError(f"--{flag.name} must be a whole number, not {raw!r}", usage=spec.usage)
        number = int(raw)
        low, high = flag.minimum, flag.maximum
        if (low is not None and number < low) or (high is not None and number > high):
            raise UsageError(
                f"--{flag.name} must be between {low} and {high}, not {number}", usage=spec.usage
            )
        return number
    if flag.kind == "duration":
        return parse_duration(raw, flag=flag.name, usage=spec.usage)
    if flag.kind == "plan":
        plan = _PLAN.match(raw)
        if not plan:
            raise UsageError(
                f"--{flag.name} takes a plan: write P-3 (or 3), not {_short(raw)!r}",
                usage=spec.usage,
            )
        return int(plan.group(1))
    if flag.kind == "word" and not _WORD.match(raw):
        raise UsageError(
            f"--{flag.name} must be a single word of letters, digits, '-', '_' or '.', "
            f"not {_short(raw)!r}",
            usage=spec.usage,
        )
    return raw


def parse_duration(raw: str, *, flag: str, usage: str) -> timedelta:
    text = raw.lower()
    if not _DURATION.match(text):
        raise UsageError(
            f"--{flag} must be a duration such as 30m, 24h, 7d or 1h30m, not {_short(raw)!r}",
            usage=usage,
        )
    seconds = sum(int(n) * _UNITS[u] for n, u in _DURATION_PART.findall(text))
    if seconds == 0 or seconds > MAX_DURATION.total_seconds():
        raise UsageError(f"--{flag} must be between 1s and 366d", usage=usage)
    return timedelta(seconds=seconds)


def _positionals(spec: CommandSpec, loose: list[str], *, lenient: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {}
    remaining = list(loose)
    for pos in spec.positionals:
        if pos.many:
            taken, remaining = remaining, []
        else:
            taken, remaining = remaining[:1], remaining[1:]
        if not taken:
            if pos.required and not lenient:
                raise UsageError(f"{spec.path} needs {pos.metavar}", usage=spec.usage)
            continue
        checked = [_check_positional(spec, pos, t) for t in taken]
        values[pos.field] = checked if pos.many else checked[0]
    if remaining:
        extra = _short(" ".join(remaining))
        raise UsageError(f"unexpected {extra!r} after {spec.path}", usage=spec.usage)
    return values


def _check_positional(spec: CommandSpec, pos: Positional, token: str) -> str:
    if pos.kind == "id" and not _ID.match(token):
        raise UsageError(
            f"{_short(token)!r} is not a job id: ids are numbers or UUIDs such as 1234 or "
            "3f2c9a1e-8d4b-4c1a-9e7f-0a1b2c3d4e5f",
            usage=spec.usage,
        )
    if pos.kind == "plan":
        match = _PLAN.match(token)
        if not match:
            raise UsageError(f"{_short(token)!r} is not a plan: write P-3 (or 3)", usage=spec.usage)
        return match.group(1)
    if pos.kind == "request":
        match = _REQUEST.match(token)
        if not match:
            raise UsageError(
                f"{_short(token)!r} is not a change request: write CR-17 (or 17)", usage=spec.usage
            )
        return match.group(1)
    if pos.kind == "person" and not _PERSON.match(token):
        raise UsageError(
            f"{_short(token)!r} is not a person: name one of [people] (bob), or mention them "
            "(@bob on Slack or Discord)",
            usage=spec.usage,
        )
    if pos.kind == "word" and not _WORD.match(token):
        raise UsageError(f"{_short(token)!r} is not a valid {pos.metavar}", usage=spec.usage)
    return token


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
