"""How a command is spelled: its words, positionals, options and required role.

One ``CommandSpec`` per command drives the free-text parser (Slack, console), the help
text and, later, the Discord option schema, so the three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from services.config import Role

ValueKind = Literal["text", "int", "duration", "word", "bool", "plan"]  # plan: P-N


@dataclass(frozen=True)
class Flag:
    name: str  # as typed, without the dashes: "error-like"
    field: str  # the model field it fills
    kind: ValueKind = "text"
    metavar: str = "TEXT"
    help: str = ""
    minimum: int | None = None
    maximum: int | None = None
    required: bool = False
    example: str | None = None
    aliases: tuple[str, ...] = ()  # earlier spellings, still read (the reply names this one)

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"

    def usage(self) -> str:
        if self.kind == "bool":
            return f"[--{self.name}]"
        shown = f"--{self.name} {self.metavar}"
        return shown if self.required else f"[{shown}]"


@dataclass(frozen=True)
class Positional:
    field: str
    metavar: str
    # person: a [people] name, or a Slack or Discord mention such as <@U0123ABCD>
    kind: Literal["id", "word", "text", "request", "plan", "person"] = "id"
    many: bool = False
    required: bool = True

    def usage(self) -> str:
        shown = f"{self.metavar}..." if self.many else self.metavar
        return shown if self.required else f"[{shown}]"


@dataclass(frozen=True)
class CommandSpec:
    group: str  # "queue" or "incident"
    name: str  # "triage"
    model: type[BaseModel]
    summary: str
    role: Role = "viewer"
    positionals: tuple[Positional, ...] = ()
    flags: tuple[Flag, ...] = field(default_factory=tuple)
    example: str | None = None
    note: str | None = None  # a rule of the options, said in the command's help
    # It changes things though its role is viewer, because an authority of its own decides
    # who may (declare: the runbook's declaration authority).
    changes: bool = False

    @property
    def path(self) -> str:
        return f"/{self.group} {self.name}"

    @property
    def read_only(self) -> bool:
        """It only reads: what a person not listed under [people] may run."""
        return self.role == "viewer" and not self.changes

    @property
    def usage(self) -> str:
        parts = [
            self.path,
            *(p.usage() for p in self.positionals),
            *(f.usage() for f in self.flags),
        ]
        return " ".join(parts)

    @property
    def short_usage(self) -> str:
        """The usage line for the command list: required parts, then [options]."""
        parts = [
            self.path,
            *(p.usage() for p in self.positionals),
            *(f.usage() for f in self.flags if f.required),
        ]
        if any(not f.required for f in self.flags):
            parts.append("[options]")
        return " ".join(parts)

    def flag(self, name: str) -> Flag | None:
        """The flag spelled ``name``, or once spelled so (one of its ``aliases``)."""
        return next((f for f in self.flags if name == f.name or name in f.aliases), None)
