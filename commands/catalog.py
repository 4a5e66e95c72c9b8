"""The catalogue: how each command is spelled (words, positionals, flags, role), one
``CommandSpec`` per command model. It drives the parser, the help text and the router's
authorization."""

from __future__ import annotations

from pydantic import BaseModel

from commands.model import (
    MAX_LIMIT,
    Approve,
    Cancel,
    Command,
    Declare,
    Dlq,
    Export,
    Halt,
    Help,
    Housekeep,
    IncidentStatus,
    IncidentTimeline,
    Notify,
    Pending,
    Redrive,
    Reject,
    Requeue,
    Resolve,
    Resume,
    Rollback,
    Runbooks,
    Show,
    ShowPlan,
    StepDone,
    Stuck,
    Triage,
    Validate,
)
from commands.spec import CommandSpec, Flag, Positional

QUEUE_FLAG = Flag(
    "queue", "queue", kind="word", metavar="Q", help="which configured queue (default: the first)"
)
SHARE_FLAG = Flag(
    "share",
    "share",
    kind="bool",
    help="post the answer in the channel for everyone (by default only you see it)",
)
INCIDENT_FLAG = Flag(
    "incident",
    "incident",
    kind="word",
    metavar="INC-N",
    help="which incident (default: the open one)",
)
LIMIT_FLAG = Flag(
    "limit",
    "limit",
    kind="int",
    metavar="N",
    help=f"how many rows to list (1-{MAX_LIMIT})",
    minimum=1,
    maximum=MAX_LIMIT,
)

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
            Flag(
                "exact",
                "exact",
                kind="bool",
                help="count the succeeded rows too, which a large table otherwise "
                "estimates (slower)",
            ),
            QUEUE_FLAG,
            SHARE_FLAG,
        ),
        example="/queue triage --since 24h",
    ),
    CommandSpec(
        "queue",
        "show",
        Show,
        "one job: its row(s), its source asset and its events",
        positionals=(Positional("job_id", "ID"),),
        flags=(QUEUE_FLAG, SHARE_FLAG),
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
            Flag(
                "failure-reason",
                "reason",
                kind="word",
                metavar="R",
                help="only this failure_reason",
                aliases=("reason",),
            ),
            Flag(
                "job-type",
                "job_type",
                kind="word",
                metavar="T",
                help="only this job type",
                aliases=("type",),
            ),
            LIMIT_FLAG,
            QUEUE_FLAG,
            SHARE_FLAG,
        ),
        example='/queue dlq --error-like "NoSuchKey" --limit 10',
        note="Filters combine: a row must match every one given.",
    ),
    CommandSpec(
        "queue",
        "stuck",
        Stuck,
        "claimed / processing jobs with no progress past the threshold",
        flags=(
            LIMIT_FLAG,
            QUEUE_FLAG,
            SHARE_FLAG,
        ),
    ),
)


REASON = Flag(
    "reason",
    "reason",
    metavar='"WHY"',
    required=True,
    help="why: the root cause and the fix (kept in the audit trail)",
    example='--reason "allowlist fixed in PR #2081"',
)

CATALOG += (
    CommandSpec(
        "queue",
        "requeue",
        Requeue,
        "failed / failed_permanently rows back to queued, retries and failure fields "
        "cleared; needs a second person's approval",
        role="operator",
        positionals=(Positional("ids", "ID", many=True),),
        flags=(REASON, QUEUE_FLAG),
        example='/queue requeue 4102 4103 --reason "allowlist fixed in PR #2081"',
    ),
    CommandSpec(
        "queue",
        "cancel",
        Cancel,
        "cancel rows by id, the duplicate queued rows, or failed "
        "rows of one failure_reason; needs approval",
        role="operator",
        positionals=(Positional("ids", "ID", many=True, required=False),),
        flags=(
            REASON,
            Flag(
                "duplicates",
                "duplicates",
                kind="bool",
                help="every queued row of an issue but its newest, and queued rows of an issue "
                "already claimed, running or done",
            ),
            Flag(
                "failure-reason",
                "failure_reason",
                kind="word",
                metavar="R",
                help="failed rows with this failure_reason",
            ),
            QUEUE_FLAG,
        ),
        example='/queue cancel --failure-reason mutex_collision --reason "pre-#2091 orphans"',
    ),
    CommandSpec(
        "queue",
        "redrive",
        Redrive,
        "dead letters back to their queue: named jobs at once, or "
        "selected ones as a staged plan (a sample, then growing waves); needs approval",
        role="operator",
        positionals=(Positional("ids", "ID", many=True, required=False),),
        flags=(
            REASON,
            Flag(
                "error-like",
                "error_like",
                metavar="TEXT",
                help="stage a plan over dead letters whose error contains TEXT",
            ),
            Flag(
                "tenant",
                "tenant",
                kind="word",
                metavar="T",
                help="stage a plan over one tenant's dead letters",
            ),
            Flag(
                "failure-reason",
                "failure_reason",
                kind="word",
                metavar="R",
                help="stage a plan over failed rows with this failure_reason",
            ),
            Flag(
                "job-type",
                "job_type",
                kind="word",
                metavar="T",
                help="stage a plan over failed rows of one job type",
            ),
            Flag("all", "all", kind="bool", help="stage a plan over every dead letter"),
            Flag(
                "sample",
                "sample",
                kind="int",
                metavar="N",
                minimum=1,
                maximum=5,
                help="the plan's first wave (1-5, default 5)",
            ),
            Flag(
                "max",
                "max",
                kind="int",
                metavar="N",
                minimum=1,
                maximum=10_000_000,
                help="redrive at most N rows in this plan",
            ),
            Flag(
                "incident",
                "incident",
                kind="word",
                metavar="INC-N",
                help="the incident this redrive belongs to",
            ),
            Flag(
                "evidence",
                "evidence",
                metavar="URL",
                help="link showing the fix is in place (deploy, PR, dashboard)",
            ),
            QUEUE_FLAG,
        ),
        example='/queue redrive --error-like "ffmpeg exited" --sample 3 --reason "OOM fix '
        'deployed" --incident INC-4',
        note="Name jobs by id, or select dead letters with filters, or take them --all. "
        "Filters combine: a row must match every one given. --error-like ffmpeg --tenant acme "
        "takes acme's ffmpeg failures; --all takes every dead letter and goes alone.",
    ),
    CommandSpec(
        "queue",
        "plan",
        ShowPlan,
        "a staged redrive's progress: waves, outcome, what is next",
        positionals=(Positional("plan", "P-N", kind="plan"),),
        flags=(SHARE_FLAG,),
        example="/queue plan P-3",
    ),
    CommandSpec(
        "queue",
        "halt",
        Halt,
        "stop a staged redrive now (no approval needed to stop)",
        role="operator",
        positionals=(Positional("plan", "P-N", kind="plan"),),
        flags=(Flag("reason", "reason", metavar='"WHY"', help="why it was stopped"),),
        example='/queue halt P-3 --reason "error rate climbing"',
    ),
    CommandSpec(
        "queue",
        "housekeep",
        Housekeep,
        "run the retry worker (Parts A-F) now; --dry-run only lists what it would change",
        flags=(
            Flag(
                "dry-run",
                "dry_run",
                kind="bool",
                help="list exactly what a run would change, and change nothing",
            ),
            Flag(
                "only",
                "only",
                metavar="A,B",
                help="only these parts (A-F, comma-separated)",
            ),
        ),
        role="operator",
        example="/queue housekeep --dry-run",
        note="it runs at once, with no approval: every statement is guarded and audited",
    ),
    CommandSpec(
        "queue",
        "resume",
        Resume,
        "go on with a halted plan; needs a new approval",
        role="operator",
        positionals=(Positional("plan", "P-N", kind="plan"),),
        flags=(REASON,),
        example='/queue resume P-3 --reason "second fix deployed"',
    ),
    CommandSpec(
        "queue",
        "rollback",
        Rollback,
        "return a plan's redriven jobs that no worker claimed "
        "yet to the dead letters, with their earlier values; needs approval",
        role="operator",
        positionals=(Positional("plan", "P-N", kind="plan"),),
        flags=(REASON,),
        note="With no row of the plan still unclaimed there is nothing to return: the plan "
        "is closed at once, without an approval, and its queue takes a new plan.",
        example='/queue rollback P-3 --reason "fix did not hold"',
    ),
    CommandSpec(
        "queue",
        "pending",
        Pending,
        "change requests waiting for approval",
        flags=(QUEUE_FLAG, SHARE_FLAG),
    ),
    CommandSpec(
        "queue",
        "approve",
        Approve,
        "approve someone else's change request (runs it when enough people approved)",
        role="approver",
        positionals=(Positional("request", "CR-N", kind="request"),),
        example="/queue approve CR-17",
    ),
    CommandSpec(
        "queue",
        "reject",
        Reject,
        "reject a change request (or withdraw your own)",
        role="operator",
        positionals=(Positional("request", "CR-N", kind="request"),),
        flags=(Flag("reason", "reason", metavar='"WHY"', help="why it was rejected"),),
        example='/queue reject CR-17 --reason "wrong tenant"',
    ),
)
# Incidents: what is declared, under which runbook.
CATALOG += (
    CommandSpec(
        "incident",
        "help",
        Help,
        "list the commands, or explain one",
        positionals=(Positional("topic", "COMMAND", kind="word", required=False),),
        example="/incident help runbooks",
    ),
    CommandSpec(
        "incident",
        "runbooks",
        Runbooks,
        "the runbooks: who may declare each scenario, who is told what within how long, "
        "the restore order; name a scenario to see one in full",
        positionals=(Positional("scenario", "SCENARIO", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident runbooks gd:queue-loss",
    ),
    CommandSpec(
        "incident",
        "declare",
        Declare,
        "declare an incident: open its thread, post the runbook's checklist, start the "
        "clocks of its communications",
        positionals=(
            Positional("scenario", "SCENARIO", kind="word"),
            Positional("summary", '"SUMMARY"', kind="text"),
        ),
        flags=(QUEUE_FLAG,),
        example='/incident declare gd:queue-loss "jobs stopped finishing" --queue workers',
        note="only people holding the runbook's declaration authority may declare "
        "(/incident runbooks shows who)",
        changes=True,
    ),
    CommandSpec(
        "incident",
        "notify",
        Notify,
        "tell an audience (posts to its channels; with no text, the runbook's draft) and "
        "mark its communication met",
        role="operator",
        positionals=(
            Positional("audience", "AUDIENCE", kind="word"),
            Positional("text", '"MESSAGE"', kind="text", required=False),
        ),
        flags=(INCIDENT_FLAG,),
        example='/incident notify actors "your jobs are safe; do not resubmit"',
    ),
    CommandSpec(
        "incident",
        "status",
        IncidentStatus,
        "the incident's communications, restore steps and validation (default: the open one)",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident status INC-3",
    ),
    CommandSpec(
        "incident",
        "timeline",
        IncidentTimeline,
        "everything that happened in the incident, in order",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident timeline INC-3",
    ),
    CommandSpec(
        "incident",
        "step",
        StepDone,
        "mark a restore step done (in the runbook's order) or a validation item confirmed",
        role="operator",
        positionals=(
            Positional("step", "STEP", kind="word"),
            Positional("done", "done", kind="word"),
        ),
        flags=(
            INCIDENT_FLAG,
            Flag("result", "result", metavar='"WHAT WAS SEEN"', help="what you checked"),
        ),
        example="/incident step dep:job-queue done",
    ),
    CommandSpec(
        "incident",
        "validate",
        Validate,
        "measure the validation items queuebot can (the count before the fault against "
        "now, the backlog falling); each that passes is done",
        role="operator",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        example="/incident validate INC-3",
    ),
    CommandSpec(
        "incident",
        "resolve",
        Resolve,
        "resolve the incident: every validation item must be done, or --override asks "
        "another person to approve resolving it without them",
        role="operator",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(
            Flag(
                "override",
                "override",
                kind="bool",
                help="a change request: resolved once another person approves",
            ),
            Flag(
                "reason",
                "reason",
                metavar='"WHY"',
                help="with --override: why it is over without those validations",
                example='--reason "checked by hand with the tenant; counts match"',
            ),
        ),
        example="/incident resolve INC-3",
    ),
    CommandSpec(
        "incident",
        "export",
        Export,
        "the incident as a Markdown postmortem: timeline, fault to recovery, "
        "communications, changes and their approvers, validation",
        positionals=(Positional("incident", "INC-N", kind="word", required=False),),
        flags=(SHARE_FLAG,),
        example="/incident export INC-3",
    ),
)

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
