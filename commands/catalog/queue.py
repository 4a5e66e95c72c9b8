"""The ``/queue`` commands: the reads (triage, one job, dead letters, stuck rows, the
board, who is on call), then the changes (requeue, cancel, redrive and its staged plans,
housekeeping) and their approvals, in the order help lists them."""

from __future__ import annotations

from commands.catalog.flags import LIMIT_FLAG, QUEUE_FLAG, REASON, SHARE_FLAG
from commands.model import (
    Approve,
    Cancel,
    Dlq,
    Halt,
    Help,
    Housekeep,
    Oncall,
    Pending,
    Redrive,
    Reject,
    Requeue,
    Resume,
    Rollback,
    Show,
    ShowBoard,
    ShowPlan,
    Stuck,
    Triage,
)
from commands.spec import CommandSpec, Flag, Positional

QUEUE: tuple[CommandSpec, ...] = (
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
                help="count every row: a large table's succeeded rows (and, on "
                "graphile-worker and Que, its waiting jobs) are otherwise estimated (slower)",
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
        "one job: its row(s), its source asset and its events; or find it by its arguments",
        positionals=(Positional("job_id", "ID", required=False),),
        flags=(
            Flag(
                "args-like",
                "args_like",
                metavar="TEXT",
                help="instead of an ID: the job whose arguments contain TEXT (case-insensitive)",
            ),
            QUEUE_FLAG,
            SHARE_FLAG,
        ),
        example="/queue show 1234",
        note="Name the job by its ID, or find it by its arguments: /queue show --args-like "
        "INV-104857 shows the one job whose arguments contain INV-104857, or lists the "
        "matches when there are several. It reads every job of the queue (the default one, "
        "or --queue Q), so it takes a moment on a large table.",
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
            Flag(
                "args-like",
                "args_like",
                metavar="TEXT",
                help="the job's arguments contain TEXT (case-insensitive)",
            ),
            LIMIT_FLAG,
            QUEUE_FLAG,
            SHARE_FLAG,
            Flag(
                "from-plan",
                "from_plan",
                kind="plan",
                metavar="P-N",
                help="only plan P-N's jobs that are dead again now",
            ),
        ),
        example='/queue dlq --error-like "NoSuchKey" --limit 10',
        note="Filters combine: a row must match every one given. --from-plan P-N lists that "
        "plan's jobs that are dead again now, in the plan's queue.",
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
    CommandSpec(
        "queue",
        "board",
        ShowBoard,
        "what waits for you and what to watch: requests to approve, your own, active plans, "
        "open incidents, each queue's dead letters over the last hour",
        flags=(SHARE_FLAG,),
        example="/queue board",
    ),
    CommandSpec(
        "queue",
        "oncall",
        Oncall,
        "who is on call now: each rota's holders (a schedule's until when, and who is "
        "next), and each owned queue's teams with their members",
        flags=(SHARE_FLAG,),
        note="/incident whois ROTA shows one rota in full, with what holding it gives",
        example="/queue oncall",
    ),
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
            Flag(
                "args-like",
                "args_like",
                metavar="TEXT",
                help="stage a plan over dead letters whose job arguments contain TEXT",
            ),
            Flag("all", "all", kind="bool", help="stage a plan over every dead letter"),
            Flag(
                "from-plan",
                "from_plan",
                kind="plan",
                metavar="P-N",
                help="stage a plan over plan P-N's jobs that are dead again now",
            ),
            Flag(
                "override-growth",
                "override_growth",
                kind="bool",
                help="go ahead although dead letters are growing (the outage is over); the "
                "approver sees it",
            ),
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
        "takes acme's ffmpeg failures; --all takes every dead letter and goes alone. "
        "--from-plan P-N takes that plan's jobs that are dead again now (with filters, those "
        "of them the filters match), in the plan's queue. --override-growth goes ahead although "
        "the dead letters are growing, once you know the outage is over: the preview shows the "
        "check as overridden, and the approval covers it.",
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
