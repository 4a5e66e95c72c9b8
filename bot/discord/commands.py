"""The app-command groups ``/queue`` and ``/incident``, drawn from the catalogue.

Each catalogue command is one subcommand; each of its positionals and flags one typed
option (see commands/options.py): job ids as a string, ``reason`` required where a change
needs one, numbers with their bounds for limits, choices for audiences, scenarios and
failure reasons. discord.py reads options from a callback's signature, so each
subcommand's callback is given the signature its catalogue entry describes.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import discord
from discord import app_commands

from bot.delivery import Asked
from bot.discord.forms import open_if_needed
from bot.discord.interactions import DiscordWiring, run_command
from commands.catalog import group_specs
from commands.forms import form_fills
from commands.options import Option, options_of
from commands.parser import GROUPS
from commands.spec import CommandSpec

MAX_DESCRIPTION = 100
MAX_CHOICES = 25


@dataclass(frozen=True)
class Choices:
    """Fixed values offered for some options (Discord shows at most 25)."""

    audiences: Sequence[str] = ()
    scenarios: Sequence[str] = ()
    failure_reasons: Sequence[str] = ()

    def for_option(self, spec: CommandSpec, option: Option) -> Sequence[str]:
        if option.name == "audience":
            values = self.audiences
        elif option.name == "scenario" and spec.name == "declare":
            values = self.scenarios
        elif option.name == "failure-reason":
            values = self.failure_reasons
        else:
            return ()
        return values if 0 < len(values) <= MAX_CHOICES else ()


def _describe(text: str) -> str:
    text = text or "…"
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def _annotation(option: Option) -> Any:
    flag = option.flag
    if flag is not None and flag.kind == "bool":
        return bool
    if flag is not None and flag.kind == "int":
        low = flag.minimum if flag.minimum is not None else 1
        high = flag.maximum if flag.maximum is not None else 2**31
        return app_commands.Range[int, low, high]
    return app_commands.Range[str, 1, 4000 if option.positional and option.positional.many else 500]


def _description(option: Option) -> str:
    if option.flag is not None:
        return _describe(option.flag.help or option.flag.metavar)
    pos = option.positional
    assert pos is not None
    if pos.many:
        return _describe(f"one or more {pos.metavar}s, separated by spaces or commas")
    return _describe(pos.metavar)


def _private(spec: CommandSpec, values: dict[str, Any]) -> bool:
    """Whether the answer is only for whoever asked: reads are, unless shared; a change's
    request is for everyone (a second person must see its buttons)."""
    return spec.role == "viewer" and values.get("share") is not True


def subcommand(spec: CommandSpec, choices: Choices) -> app_commands.Command[Any, ..., None]:
    options = options_of(spec)

    async def callback(interaction: discord.Interaction[Any], **params: Any) -> None:
        wiring = getattr(interaction.client, "wiring", None)
        if not isinstance(wiring, DiscordWiring):
            raise RuntimeError("an app command reached a client without its wiring")
        values = {o.name: _value(params.get(o.parameter)) for o in options if o.parameter in params}
        if await open_if_needed(wiring, interaction, spec.group, spec.name, values):
            return  # missing what a form asks: the form opened in its place
        await run_command(
            wiring,
            interaction,
            Asked(group=spec.group, name=spec.name, values=values),
            private=_private(spec, values),
            where=f"Discord {spec.path}",
        )

    parameters = [inspect.Parameter("interaction", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(
            o.parameter,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=_annotation(o),
            default=inspect.Parameter.empty
            if o.required and not form_fills(spec, o.name)
            else None,
        )
        for o in options
    ]
    callback.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    callback.__name__ = spec.name
    decorated: Any = callback
    renames = {o.parameter: o.name for o in options if o.parameter != o.name}
    if renames:
        decorated = app_commands.rename(**renames)(decorated)
    if options:
        decorated = app_commands.describe(**{o.parameter: _description(o) for o in options})(
            decorated
        )
    offered = {
        o.parameter: [app_commands.Choice(name=v, value=v) for v in choices.for_option(spec, o)]
        for o in options
    }
    offered = {k: v for k, v in offered.items() if v}
    if offered:
        decorated = app_commands.choices(**offered)(decorated)
    return app_commands.Command(
        name=spec.name, description=_describe(spec.summary), callback=decorated
    )


def _value(value: Any) -> Any:
    if isinstance(value, app_commands.Choice):
        return value.value
    return value


def groups(choices: Choices) -> list[app_commands.Group]:
    """``/queue`` and ``/incident``, each with its catalogue commands."""
    found = []
    for name in GROUPS:
        group = app_commands.Group(
            name=name,
            description=_describe(
                "job-queue triage and two-person-approved changes"
                if name == "queue"
                else "incidents: declare, notify, follow the runbook, resolve"
            ),
        )
        for spec in group_specs(name):
            group.add_command(subcommand(spec, choices))
        found.append(group)
    return found
