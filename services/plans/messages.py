"""What plans post: their own message (kept up to date) and one message per wave; and
what the plans' kinds of change request say (a staged redrive, a resume, a rollback) of
a request and of its quorum."""

from __future__ import annotations

from services import format as fmt
from services.changes.model import ChangeView, Executed, RequestState
from services.changes.words import KindWords
from services.config import ApprovalConfig
from services.message import Fields, Heading, Message, Table, Text
from services.plans.model import PlanState, PlanView, Wave, WaveOutcome

BAR = 20


def progress_bar(done: int, total: int) -> str:
    filled = 0 if total == 0 else round(BAR * done / total)
    return "[" + "#" * filled + "." * (BAR - filled) + "]"


def _jobs(n: int) -> str:
    return f"{n:,} job" if n == 1 else f"{n:,} jobs"


def wave_name(p: PlanView, number: int, size: int | None = None) -> str:
    """A wave as a person reads it: "sample (2 jobs)", "wave 1 of 3 (10 jobs)". Waves are
    counted after the sample; the size is the wave's own, else the schedule's."""
    if size is None:
        size = p.schedule[number] if number < len(p.schedule) else 0
    if number == 0:
        return f"sample ({_jobs(size)})"
    return f"wave {number} of {max(len(p.schedule) - 1, number)} ({_jobs(size)})"


def where_now(p: PlanView) -> str:
    """Where the plan is: the wave it is in, how that wave stands, and what comes next."""
    current = p.waves[-1] if p.waves else None
    if current is None:
        return "not started"
    name = wave_name(p, current.number, current.size)
    after = current.number + 1
    then = wave_name(p, after) if after < len(p.schedule) else None
    if p.state is PlanState.COMPLETED:
        waves = len(p.waves) - 1
        done = (
            "done: the sample finished"
            if waves == 0
            else f"done: the sample and {waves} wave(s) finished"
        )
        return done + _died_again(p) + _left_table(p)
    if p.state is PlanState.ROLLED_BACK:
        held = (
            "; the rows a worker held are counted as they finish"
            if current.finished_at is None
            else ""
        )
        return (
            f"rolled back during {name}: {p.rolled_back:,} job(s) returned to the dead "
            f"letters{held}"
        )
    if p.state is PlanState.CLOSED:
        if current.finished_at is None:
            return f"closed in {name}; its rows still out are counted as they finish"
        return f"closed after {name}"
    if p.state is PlanState.HALTED:
        out = (
            "; its rows still out are counted as they finish" if current.finished_at is None else ""
        )
        return f"halted in {name}{out}" + (f"; {then} has not started" if then else "")
    # a wave halted and resumed runs on until its rows are done: finished is when they are
    still = current.outcome is WaveOutcome.RUNNING or (
        current.outcome is WaveOutcome.HALTED and current.finished_at is None
    )
    doing = "running" if still else "finished"
    return f"{name} {doing}, " + (f"{then} next" if then else "the last wave")


def _died_again(p: PlanView) -> str:
    """A completed plan's jobs that died again, and the command that takes them (those of
    them still dead when it is run) into a plan of their own."""
    if not p.redead:
        return ""
    return (
        f"; {p.succeeded:,} succeeded, {p.redead:,} died again: redrive them with "
        f'/queue redrive --from-plan {p.ref} --reason "..."'
    )


def _left_table(p: PlanView) -> str:
    """A completed plan's jobs that left the table with their outcome unknown."""
    if not p.unknown:
        return ""
    return f"; {p.unknown:,} left the table with their outcome unknown"


def plan_message(p: PlanView) -> Message:
    where = where_now(p)
    state = {
        PlanState.RUNNING: "running",
        PlanState.HALTED: "HALTED",
        PlanState.COMPLETED: "completed",
        PlanState.ROLLED_BACK: "rolled back",
        PlanState.CLOSED: "closed",
    }[p.state]
    head = f"{p.ref}: redrive {p.total:,} dead letters in {p.queue} - {state}"
    bar = progress_bar(p.succeeded, p.total)
    blocks: list[Heading | Text | Fields | Table] = [
        Heading(head),
        Text(
            f"{bar} {p.succeeded:,}/{p.total:,} succeeded; {p.redriven:,} redriven; "
            f"{p.redead:,} dead again; {_unknown(p.unknown)}now: {where}",
            mono=True,
        ),
        Fields(
            (
                ("requested by", p.requester),
                ("approved by", ", ".join(p.approvers) or "-"),
                ("request", f"CR-{p.request}"),
                ("schedule", " + ".join(map(str, p.schedule))),
                *((("incident", p.incident),) if p.incident else ()),
            )
        ),
        Text(f"Reason: {p.reason}"),
    ]
    if p.note:
        blocks.append(Text(p.note))
    if p.waves:
        blocks.append(_waves_table(p))
    if p.state is PlanState.HALTED:
        blocks.append(
            Text(
                f"Resume (needs a new approval): /queue resume {p.ref} --reason "
                f'"..."   Roll back the unclaimed: /queue rollback {p.ref} '
                '--reason "..." (with none unclaimed, that closes the plan at once)'
            )
        )
    return Message(f"{head}: {p.succeeded:,}/{p.total:,} succeeded", tuple(blocks))


def _unknown(n: int) -> str:
    """The status line's count of jobs that left the table with their outcome unknown."""
    return f"{n:,} left the table, outcome unknown; " if n else ""


def _waves_table(p: PlanView) -> Table:
    """Each wave's counts; a column of jobs that left the table with their outcome unknown
    where a wave has any."""
    unknown = any(w.unknown for w in p.waves)
    head = ("wave", "size", "started", "finished", "ok", "dead again")
    rows = tuple(
        (
            w.label,
            str(w.size),
            w.started_at.strftime("%H:%M:%S"),
            w.finished_at.strftime("%H:%M:%S") if w.finished_at else "-",
            str(w.succeeded),
            str(w.redead),
            *((str(w.unknown),) if unknown else ()),
            str(w.skipped),
            str(w.rolled_back),
            w.outcome.replace("_", " "),
        )
        for w in p.waves
    )
    tail = ("skipped", "rolled back", "outcome")
    return Table(
        (*head, *(("unknown",) if unknown else ()), *tail),
        rows,
        title="Waves",
        numeric=(1, 4, 5, 6, 7, 8) if unknown else (1, 4, 5, 6, 7),
    )


def wave_started(p: PlanView, wave: Wave) -> Message:
    text = (
        f"{p.ref} {wave.label} started: {wave.size:,} job(s) returned to the queue "
        f"({p.redriven:,}/{p.total:,} so far)"
    )
    if wave.skipped:
        text += f"; {wave.skipped} had moved on and were skipped"
    return Message(text, (Text(text),))


def wave_finished(p: PlanView, wave: Wave) -> Message:
    text = (
        f"{p.ref} {wave.label} finished: {wave.succeeded:,} succeeded, "
        f"{wave.redead:,} dead again"
        + (f", {wave.unknown:,} left the table (outcome unknown)" if wave.unknown else "")
        + f" - {wave.outcome.replace('_', ' ')}"
    )
    return Message(text, (Text(text),))


def plan_note(p: PlanView, text: str) -> Message:
    return Message(f"{p.ref}: {text}", (Text(f"{p.ref}: {text}"),))


# -- the plans' kinds of change request ---------------------------------------------

MAX_SAMPLE = 5  # a staged redrive's sample is 1 to 5 rows (--sample, [redrive] sample)


def one_approval(approval: ApprovalConfig) -> str:
    """What a staged redrive, judged by its sample, needs: true for every threshold."""
    if approval.large_change_rows >= MAX_SAMPLE:
        return "needs one approval"
    return f"needs one approval with --sample {approval.large_change_rows} or less"


def staged(approval: ApprovalConfig) -> str:
    return f"a staged redrive is judged by its sample, and {one_approval(approval)}"


class StagedWords(KindWords):
    changes = "its sample changes"

    def headline(self, v: ChangeView) -> str:
        return f"staged redrive of {fmt.count(v.eligible)} dead letter(s) in queue {v.queue}"

    def outcome(self, v: ChangeView, result: Executed) -> str:
        return (
            f"plan P-{result.plan} started with its sample of "
            f"{v.schedule[0] if v.schedule else 0}; follow it with /queue plan "
            f"P-{result.plan}"
        )

    def quorum_what(self, kind: str, rows: int, judged: int, approval: ApprovalConfig) -> str:
        what = f"staged redrive of {rows} row{'' if rows == 1 else 's'}"
        if judged > approval.large_change_rows:
            what += f", whose sample of {judged} rows is more than {approval.large_change_rows},"
        return what

    def ways_out(self, approval: ApprovalConfig) -> list[str]:
        return [
            f"give --sample {approval.large_change_rows} or less (a staged redrive is "
            "judged by its sample)"
        ]

    def one_approval(self, approval: ApprovalConfig, rows: int, judged: int) -> str | None:
        return (
            "One approval: a staged redrive is judged by the rows it changes before "
            f"anyone can halt it, its sample of {judged}; each later wave starts only "
            "once the one before it succeeded, and anyone may halt it (/queue halt, no "
            "approval needed)."
        )

    def fewer(self, approval: ApprovalConfig) -> str:
        return (
            f" With --sample {approval.large_change_rows} or less it needs one (a staged "
            "redrive is judged by its sample)."
        )


class ResumeWords(KindWords):
    changes = "its next wave changes"

    def headline(self, v: ChangeView) -> str:
        return f"resume plan P-{v.plan} ({fmt.count(v.eligible)} row(s) to go)"

    def outcome(self, v: ChangeView, result: Executed) -> str:
        return f"plan P-{result.plan} is running again"

    def quorum_what(self, kind: str, rows: int, judged: int, approval: ApprovalConfig) -> str:
        if judged > approval.large_change_rows:
            return (
                f"resume, whose next wave of {judged} rows is more than "
                f"{approval.large_change_rows},"
            )
        return "resume"

    def one_approval(self, approval: ApprovalConfig, rows: int, judged: int) -> str | None:
        return (
            "One approval: a resume is judged by the rows it changes before anyone can "
            f"halt the plan again, its next wave of {judged}; the waves after it start "
            "only once the one before succeeded, and anyone may halt it (/queue halt, "
            "no approval needed)."
        )


class RollbackWords(KindWords):
    def headline(self, v: ChangeView) -> str:
        return (
            f"roll back plan P-{v.plan} ({fmt.count(v.eligible)} unclaimed row(s) "
            f"{_counted_when(v)})"
        )

    def outcome(self, v: ChangeView, result: Executed) -> str:
        return (
            f"plan P-{result.plan} rolled back: "
            f"{fmt.count(len(result.changed))} unclaimed row(s) returned to "
            "the dead letters"
        )


def _counted_when(v: ChangeView) -> str:
    """A rollback's count was taken when it was requested: "now" only in the reply to the
    request itself (pending, nobody approved yet), not when it is shown again later."""
    return "now" if v.state is RequestState.PENDING and not v.approvals else "when requested"
