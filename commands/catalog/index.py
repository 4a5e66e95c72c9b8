"""The catalogue assembled: every command family's specs in one tuple, in the order help
lists them, and the lookups the parser, help, the router and Discord's options use."""

from __future__ import annotations

from pydantic import BaseModel

from commands.catalog.incident import INCIDENT
from commands.catalog.queue import QUEUE
from commands.model import Command, Help
from commands.spec import CommandSpec

CATALOG: tuple[CommandSpec, ...] = QUEUE + INCIDENT

# Every group has its own help command, all of them the one Help model.
HELP_SPECS: dict[str, CommandSpec] = {s.group: s for s in CATALOG if s.model is Help}
SPECS_BY_MODEL: dict[type[BaseModel], CommandSpec] = {
    s.model: s for s in CATALOG if s.model is not Help
}


def spec_for(command: Command) -> CommandSpec:
    if isinstance(command, Help):
        return HELP_SPECS[command.group]
    return SPECS_BY_MODEL[type(command)]


def find_spec(group: str, name: str) -> CommandSpec | None:
    return next((s for s in CATALOG if s.group == group and s.name == name), None)


def group_specs(group: str) -> list[CommandSpec]:
    return [s for s in CATALOG if s.group == group]
