"""Commands as typed data, and the catalogue of how each is spelled.

Parsing (free text or Discord options) produces one of these models; the router sends it
to its handler by type.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from commands.spec import CommandSpec, Flag, Positional

MAX_LIMIT = 200


class Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class QueueCommand(Command):
    queue: str | None = None


class Help(Command):
    topic: str | None = None


class Triage(QueueCommand):
    since: timedelta | None = None
    job_type: str | None = None


class Show(QueueCommand):
    job_id: str


class Dlq(QueueCommand):
    error_like: str | None = Field(default=None, min_length=1, max_length=500)
    tenant: str | None = None
    reason: str | None = None
    job_type: str | None = None
    limit: int = Field(default=20, ge=1, le=MAX_LIMIT)


class Stuck(QueueCommand):
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)


QUEUE_FLAG = Flag(
    "queue", "queue", kind="word", metavar="Q", help="which configured queue (default: the first)"
)
LIMIT_HELP = f"how many rows to list (1-{MAX_LIMIT})"

CATALOG: tuple[CommandSpec, ...] = (
    CommandSpec(
        "queue",
        "help",
        Help,
        "list the commands, or explain one",
        positionals=(Positional("topic", "COMMAND", kind="word", required=False),),
        example="/queue help dlq",
    ),
    CommandSpec(
        "queue",
        "triage",
        Triage,
        "breakdowns by status, failure signature, job type and age; stuck and duplicates",
        flags=(
            Flag("type", "job_type", kind="word", metavar="T", help="only this job type"),
            Flag(
                "since",
                "since",
                kind="duration",
                metavar="24h",
                help="only rows queued in this window (e.g. 30m, 24h, 7d)",
            ),
            QUEUE_FLAG,
        ),
        example="/queue triage --since 24h",
    ),
    CommandSpec(
        "queue",
        "show",
        Show,
        "one job: its row(s), its source asset and its events",
        positionals=(Positional("job_id", "ID"),),
        flags=(QUEUE_FLAG,),
        example="/queue show 1234",
    ),
    CommandSpec(
        "queue",
        "dlq",
        Dlq,
        "list dead-lettered / failed jobs, newest first",
        flags=(
            Flag(
                "error-like",
                "error_like",
                metavar="TEXT",
                help="error text contains TEXT (case-insensitive)",
            ),
            Flag("tenant", "tenant", kind="word", metavar="T", help="only this tenant"),
            Flag("reason", "reason", kind="word", metavar="R", help="only this failure_reason"),
            Flag("type", "job_type", kind="word", metavar="T", help="only this job type"),
            Flag(
                "limit",
                "limit",
                kind="int",
                metavar="N",
                help=LIMIT_HELP,
                minimum=1,
                maximum=MAX_LIMIT,
            ),
            QUEUE_FLAG,
        ),
        example='/queue dlq --error-like "NoSuchKey" --limit 10',
    ),
    CommandSpec(
        "queue",
        "stuck",
        Stuck,
        "claimed / processing jobs with no progress past the threshold",
        flags=(
            Flag(
                "limit",
                "limit",
                kind="int",
                metavar="N",
                help=LIMIT_HELP,
                minimum=1,
                maximum=MAX_LIMIT,
            ),
            QUEUE_FLAG,
        ),
    ),
)

SPECS_BY_MODEL: dict[type[BaseModel], CommandSpec] = {s.model: s for s in CATALOG}


def spec_for(command: Command) -> CommandSpec:
    return SPECS_BY_MODEL[type(command)]


def find_spec(group: str, name: str) -> CommandSpec | None:
    return next((s for s in CATALOG if s.group == group and s.name == name), None)


def group_specs(group: str) -> list[CommandSpec]:
    return [s for s in CATALOG if s.group == group]
