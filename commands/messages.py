"""Every user-visible string that is not data: errors, refusals, help.

Kept in one module so wording stays consistent and reviewable (as bolt-python keeps
``logger/messages.py``).
"""

from __future__ import annotations

from commands.catalog import CATALOG, find_spec, group_specs
from commands.reply import Reply
from commands.spec import CommandSpec
from services.errors import (
    ConfigError,
    Conflict,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    QueuebotError,
    Unavailable,
    UsageError,
)
from services.message import Heading, Message, Table, Text
from services.people import Person

_TITLES: dict[type[QueuebotError], str] = {
    UsageError: "That command could not be read",
    NotFound: "Not found",
    PermissionDenied: "Not allowed",
    Conflict: "Already changed",
    PreconditionFailed: "Refused by a safety check",
    Unavailable: "Temporarily unavailable",
    ConfigError: "Configuration problem",
}
UNEXPECTED_TITLE = "Unexpected error"
FALLBACK_TITLE = "Something went wrong"
# Every heading an error reply can carry: tools that read replies (bench/) tell errors by it.
ERROR_TITLES: frozenset[str] = frozenset({*_TITLES.values(), UNEXPECTED_TITLE, FALLBACK_TITLE})


def unknown_user_denied(platform: str, account: str) -> str:
    return (
        f"queuebot does not know your {platform} account {account}. Ask an admin to add you "
        "under [people] in queuebot.toml."
    )


def unknown_user_read_only(platform: str, account: str, path: str) -> str:
    group = path.split(maxsplit=1)[0]
    reads = ", ".join(s.name for s in group_specs(group.lstrip("/")) if s.role == "viewer")
    return (
        f"{path} changes things, and your {platform} account {account} is not listed under "
        f"[people] in queuebot.toml, so you may only use read-only commands ({group} {reads})."
    )


def unknown_user_share(platform: str, account: str) -> str:
    return (
        f"--share posts the answer for the whole channel, and your {platform} account "
        f"{account} is not listed under [people] in queuebot.toml. Run it without --share "
        "to see the answer yourself."
    )


def missing_role(person: Person, path: str, role: str) -> str:
    return f"{path} needs the {role} role; {person.name} has: {person.role_list()}."


def error_reply(exc: QueuebotError) -> Reply:
    title = next((t for k, t in _TITLES.items() if isinstance(exc, k)), FALLBACK_TITLE)
    blocks: list[Heading | Text] = [Heading(title), Text(exc.message)]
    if isinstance(exc, UsageError) and exc.usage:
        blocks.append(Text(f"Usage: {exc.usage}", mono=True))
    return Reply(Message(f"{title}: {exc.message}", tuple(blocks)), ephemeral=True, error=True)


def unexpected_reply(correlation_id: str) -> Reply:
    text = (
        "queuebot hit an unexpected error and did not finish. Nothing was half-done: "
        f"changes run in one transaction. Quote reference {correlation_id} to whoever runs "
        "queuebot; the details are in its log."
    )
    return Reply(Message(text, (Heading(UNEXPECTED_TITLE), Text(text))), error=True)


def help_reply(topic: str | None, group: str = "queue") -> Reply:
    if topic is not None:
        spec = find_spec(group, topic.lower())
        if spec is None:
            names = ", ".join(s.name for s in group_specs(group))
            raise UsageError(
                f"no command /{group} {topic}; commands: {names}", usage=f"/{group} help"
            )
        return Reply(_one_help(spec))
    rows = tuple((s.short_usage, s.summary) for s in CATALOG)
    text = "Commands (add --help to any for details):"
    return Reply(
        Message(text, (Heading("queuebot"), Text(text), Table(("usage", "what it does"), rows)))
    )


def _one_help(spec: CommandSpec) -> Message:
    blocks: list[Heading | Text | Table] = [
        Heading(spec.path),
        Text(spec.summary),
        Text(f"Usage: {spec.usage}", mono=True),
    ]
    if spec.flags:
        blocks.append(
            Table(
                ("option", "meaning"),
                tuple(
                    (f"--{f.name}" + ("" if f.kind == "bool" else f" {f.metavar}"), f.help)
                    for f in spec.flags
                ),
            )
        )
    if spec.example:
        blocks.append(Text(f"Example: {spec.example}", mono=True))
    if spec.role != "viewer":
        blocks.append(Text(f"Needs the {spec.role} role."))
    return Message(f"{spec.usage}: {spec.summary}", tuple(blocks))
