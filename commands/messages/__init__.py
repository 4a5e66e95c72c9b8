"""Every user-visible string that is not data: errors, refusals, help.

Kept in one module so wording stays consistent and reviewable (as bolt-python keeps
``logger/messages.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from commands.catalog import CATALOG, find_spec, group_specs
from commands.reply import Reply
from commands.spec import CommandSpec
from services.access import Holders
from services.db.on_commit import PostFailure
from services.errors import (
    AlreadyApproved,
    ChecksFailed,
    ConcurrentChange,
    ConfigError,
    Conflict,
    DatabaseUnavailable,
    MeasuredFailing,
    NotFound,
    NotReadyToResolve,
    OutOfOrder,
    OwnRequest,
    PermissionDenied,
    PlanActive,
    PlanStateConflict,
    PreconditionFailed,
    QueuebotError,
    RequestDecided,
    RequestExpired,
    Unavailable,
    UsageError,
)
from services.message import Block, Heading, Message, Table, Text
from services.people import Person

# Most specific first: the first class an error is an instance of names it.
_TITLES: dict[type[QueuebotError], str] = {
    RequestDecided: "Already decided",
    RequestExpired: "Request expired",
    AlreadyApproved: "Already approved by you",
    OwnRequest: "Needs another person",
    PlanActive: "A plan is already active on this queue",
    PlanStateConflict: "Plan not in that state",
    ConcurrentChange: "Changed at the same moment",
    OutOfOrder: "Out of order",
    NotReadyToResolve: "Not ready to resolve",
    MeasuredFailing: "Measured as failing: needs another person",
    DatabaseUnavailable: "Database unavailable",
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
UNKNOWN_BUTTON_TITLE = "Unknown button"
# Every heading an error reply can carry: tools that read replies (bench/) tell errors by it.
ERROR_TITLES: frozenset[str] = frozenset(
    {*_TITLES.values(), UNEXPECTED_TITLE, FALLBACK_TITLE, UNKNOWN_BUTTON_TITLE}
)


def how_to_be_known(
    platform: str, account: str, people: Sequence[str], config_file: str | None
) -> str:
    """What an unknown user can do about it. In the console they choose who they act as
    (and learn which file was read); in a chat an admin has to add their account."""
    if platform == "console":
        where = config_file or "no file (queuebot runs on its defaults; see --config)"
        if not people:
            return f"Nobody is listed under [people] in {where}: add people there to act as them."
        first = people[0]
        return (
            f"To act as someone listed under [people] in {where}, start the line with "
            f"@{first} (e.g. @{first} /queue pending) or start the console with --as {first}; "
            f"people: {', '.join(people)}."
        )
    return (
        f"Ask an admin to add you under [people] in queuebot's configuration: "
        f'[people.NAME] {platform} = "{account}", with your roles.'
    )


def unknown_user_denied(platform: str, account: str, join: str = "") -> str:
    return f"queuebot does not know your {platform} account {account}. {join}".strip()


def unknown_user_read_only(platform: str, account: str, path: str, join: str = "") -> str:
    group = path.split(maxsplit=1)[0]
    reads = ", ".join(s.name for s in group_specs(group.lstrip("/")) if s.read_only)
    return (
        f"{path} changes things, and your {platform} account {account} is not listed under "
        f"[people], so you may only use read-only commands ({group} {reads}). {join}"
    ).strip()


def unknown_user_share(platform: str, account: str, join: str = "") -> str:
    return (
        f"--share posts the answer for the whole channel, and your {platform} account "
        f"{account} is not listed under [people]. Run it without --share to see the answer "
        f"yourself. {join}"
    ).strip()


def missing_role(person: Person, path: str, role: str) -> str:
    unread = "".join(f" {note}." for note in person.notes)
    return f"{path} needs the {role} role; {person.name} has: {person.role_list()}.{unread}"


def with_notes(message: Message, notes: Sequence[str]) -> Message:
    """A reply whose decision rested on a group read stale, or on a group not read at all:
    it says so, once per source."""
    if not notes:
        return message
    return Message(message.summary, (*message.blocks, *(Text(f"Note: {n}.") for n in notes)))


def _hm(value: datetime | None) -> str:
    return value.strftime("%H:%M UTC") if value else "-"


def _decided(e: RequestDecided) -> str:
    if e.state == "executed":
        return (
            f"CR-{e.number} was already approved by {', '.join(e.approvers)} at "
            f"{_hm(e.decided_at)} and executed: {e.changed:,} row(s) changed, "
            f"{e.skipped:,} skipped. Nothing more was done."
        )
    when = _hm(e.decided_at)
    if e.withdrawn:
        return f"CR-{e.number} was withdrawn by {e.rejected_by} at {when}; nothing was changed."
    why = f" ({e.rejection_reason})" if e.rejection_reason else ""
    return f"CR-{e.number} was rejected by {e.rejected_by} at {when}{why}; nothing was changed."


def _expired(e: RequestExpired) -> str:
    return (
        f"CR-{e.number} expired at {_hm(e.expired_at)} without approval; request it again if "
        "the change is still wanted."
    )


def _already_approved(e: AlreadyApproved) -> str:
    # only a large change needs more than one approval: say which setting makes it so
    return (
        f"you already approved CR-{e.number}; it needs {e.missing} more approval(s) from "
        "someone else (a change of more than [approval] large_change_rows rows needs "
        "[approval] large_change_approvals approvers)."
    )


def _own_request(e: OwnRequest) -> str:
    return (
        f"you requested CR-{e.number}; another approver must approve it (the two-person rule "
        "holds across Slack, Discord and the console)."
    )


def _plan_active(e: PlanActive) -> str:
    return (
        f"queue {e.queue} already has an active plan, P-{e.plan}: one plan per queue. See "
        f"/queue plan P-{e.plan}; halt or roll it back first."
    )


_PLAN_STATES = {
    "running": "running",
    "halted": "halted",
    "completed": "completed: every wave is done",
    "rolled_back": "rolled back",
    "closed": "closed",
}


def _plan_state(e: PlanStateConflict) -> str:
    needed = " or ".join(_PLAN_STATES.get(s, s) for s in e.needed)
    return (
        f"P-{e.number} is {_PLAN_STATES.get(e.state, e.state)}; only a {needed} plan can be "
        f"{_PARTICIPLES.get(e.action, e.action)}. See /queue plan P-{e.number}."
    )


_PARTICIPLES = {"halt": "halted", "resume": "resumed", "roll back": "rolled back"}


def _concurrent(e: ConcurrentChange) -> str:
    return (
        f"someone changed {e.subject} at the same moment; nothing was changed by this "
        "command. Look again (/queue pending, /queue plan) and retry if it is still needed."
    )


def _database(e: DatabaseUnavailable) -> str:
    if e.committed is None:
        return (
            f"the database {e.database} failed while saving ({e.detail}); the change may or "
            "may not have been saved. Check with /queue pending or /queue plan before trying "
            "again."
        )
    return f"the database {e.database} is unavailable ({e.detail}); nothing was changed. Try again."


_WORDS: dict[type[QueuebotError], Callable[[Any], str]] = {
    RequestDecided: _decided,
    RequestExpired: _expired,
    AlreadyApproved: _already_approved,
    OwnRequest: _own_request,
    PlanActive: _plan_active,
    PlanStateConflict: _plan_state,
    ConcurrentChange: _concurrent,
    DatabaseUnavailable: _database,
}


def describe(exc: QueuebotError) -> tuple[str, str]:
    """The title and the text a person reads for ``exc``."""
    title = next((t for k, t in _TITLES.items() if isinstance(exc, k)), FALLBACK_TITLE)
    words = next((w for k, w in _WORDS.items() if isinstance(exc, k)), None)
    return title, words(exc) if words is not None else exc.message


def with_post_failures(
    message: Message, failures: Sequence[PostFailure], *, pending: bool = False
) -> Message:
    """A reply for a committed change whose chat posts afterwards failed, or had not all
    gone out when the reply was due (``pending``: a channel holding them to its pace or
    a Retry-After): the change stands; the person learns the posts are not there yet, and
    why, where queuebot knows."""
    notes: list[str] = []
    if failures:
        why = "; ".join(f.error for f in failures)
        notes.append(
            f"Done, but the chat post about it failed ({why}); it is retried until it goes "
            "out, and /queue plan shows the state now."
        )
    if pending:
        notes.append(
            "The chat posts about it have not all gone out yet: they are kept, and go out "
            "as soon as their channels take them."
        )
    if not notes:
        return message
    note = " ".join(notes)
    blocks: tuple[Block, ...] = (*message.blocks, Text(note))
    return Message(f"{message.summary} ({note})", blocks)


def with_renamed_flags(message: Message, renamed: Sequence[tuple[str, str]]) -> Message:
    """A reply to a command written with earlier flag spellings: it worked, and the
    person learns the one name each concept has now."""
    note = "; ".join(f"--{old} is now spelled --{new}" for old, new in renamed)
    note += " (the old spelling still works for now)."
    return Message(f"{message.summary} (Note: {note})", (*message.blocks, Text(f"Note: {note}")))


def checks_table(checks: Sequence[tuple[str, str, str]], title: str = "Preconditions") -> Table:
    """A change's checks, one row each: a preview and a refusal print them alike."""
    return Table(("precondition", "verdict", "detail"), tuple(checks), title=title)


def error_reply(exc: QueuebotError) -> Reply:
    title, text = describe(exc)
    blocks: list[Block] = [Heading(title), Text(text)]
    if isinstance(exc, ChecksFailed):  # what refused it, then every check as a preview shows
        text = f"{exc.refusal}."
        blocks = [Heading(title), Text(text), checks_table(exc.checks)]
    if isinstance(exc, UsageError) and exc.usage:
        blocks.append(Text(f"Usage: {exc.usage}", mono=True))
    return Reply(Message(f"{title}: {text}", tuple(blocks)), ephemeral=True, error=True)


def unexpected_reply(correlation_id: str) -> Reply:
    text = (
        "queuebot hit an unexpected error and did not finish. Nothing was half-done: "
        f"changes run in one transaction. Quote reference {correlation_id} to whoever runs "
        "queuebot; the details are in its log."
    )
    return Reply(Message(text, (Heading(UNEXPECTED_TITLE), Text(text))), error=True)


def unknown_button(action_id: str) -> Reply:
    """A click on a button that names no change request (``cr:approve:0``, or a value
    queuebot never draws): nothing is done, and the person is told so."""
    shown = action_id if len(action_id) <= 80 else action_id[:79] + "…"
    text = (
        f"this button ({shown}) names no change request queuebot can act on; nothing was "
        "done. /queue pending lists the requests waiting for a decision."
    )
    return Reply(
        Message(f"{UNKNOWN_BUTTON_TITLE}: {text}", (Heading(UNKNOWN_BUTTON_TITLE), Text(text))),
        error=True,
    )


def help_reply(topic: str | None, group: str = "queue") -> Reply:
    if topic is not None:
        spec = find_spec(group, topic.lower())
        if spec is None:
            names = ", ".join(s.name for s in group_specs(group))
            raise UsageError(
                f"no command /{group} {topic}; commands: {names}", usage=f"/{group} help"
            )
        return Reply(_one_help(spec))
    rows = tuple((s.short_usage, s.summary) for s in group_specs(group))
    text = f"/{group} commands (add --help to any for details):"
    others = sorted({s.group for s in CATALOG} - {group})
    blocks: list[Block] = [Heading(f"queuebot /{group}"), Text(text)]
    blocks.append(Table(("usage", "what it does"), rows))
    if others:
        blocks.append(Text("Also: " + ", ".join(f"/{g} help" for g in others) + "."))
    return Reply(Message(text, tuple(blocks)))


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
    if spec.note:
        blocks.append(Text(spec.note))
    if spec.example:
        blocks.append(Text(f"Example: {spec.example}", mono=True))
    if spec.role != "viewer":
        blocks.append(Text(f"Needs the {spec.role} role."))
    return Message(f"{spec.usage}: {spec.summary}", tuple(blocks))


RESTART_TITLE = "Done before a restart"


def done_before_restart(asked: str, outcome: str | None) -> Reply:
    """The answer to a change that committed just before its process died, given by the
    process that took the delivery over: what it did, and that it did it once."""
    did = outcome or "it was carried out"
    text = (
        f"{did}. queuebot restarted after carrying out {asked} and before it could answer; "
        "it was done once, and asking again is not needed. /queue pending lists the "
        "requests still waiting for a decision."
    )
    return Reply(
        Message(f"{RESTART_TITLE}: {text}", (Heading(RESTART_TITLE), Text(text))),
        ephemeral=False,
    )


NOT_RETRIED_TITLE = "Failed, not retried"


def not_retried(asked: str, reference: str, died: int) -> Reply:
    """The answer to a command whose process died every time it was carried out, given
    instead of running it once more: which command, that it was given up, and the
    reference that finds it in the log. Shown where the person reads it, never told to
    ask again to see it: asking again runs it again."""
    text = (
        f"{asked}: this command failed while being carried out; it was not retried. It was "
        f"started {died} times, and each time the process carrying it out stopped before it "
        "could answer; queuebot has no record of it finishing. Quote reference "
        f"{reference} to whoever runs queuebot before asking again (asking runs it again); "
        "the details are in its log."
    )
    return Reply(
        Message(f"{NOT_RETRIED_TITLE}: {text}", (Heading(NOT_RETRIED_TITLE), Text(text))),
        ephemeral=False,
    )


def not_recorded(asked: str, why: str) -> Reply:
    """The answer to a command or click queuebot could not write down before the platform
    needed its acknowledgement: nothing was done with it, and nothing ever will be (a
    write still on its way when the database comes back is refused or undone)."""
    title = _TITLES[DatabaseUnavailable]
    text = (
        f"{asked} was not recorded: queuebot's database {why}. Nothing was done and nothing "
        "was changed; try again when the database is back."
    )
    return Reply(
        Message(f"{title}: {text}", (Heading(title), Text(text))), ephemeral=True, error=True
    )


def holders_words(held: Holders | None) -> str:
    """Who holds a rota now, in a few words: names, a schedule's next shift, or why not
    known."""
    if held is None:
        return "no such rota"
    if held.unavailable:
        return held.unavailable
    now = ", ".join(held.now) if held.now else "nobody holds it now"
    stale = " (as last read; the source is not answering)" if held.stale else ""
    if held.until is not None:
        nxt = f", then {held.next}" if held.next else ""
        return f"now: {now}, until {held.until.astimezone(UTC):%Y-%m-%d %H:%M} UTC{nxt}"
    return f"now: {now}{stale}"
