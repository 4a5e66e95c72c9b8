"""The triage of a queue as people read it: ``/queue triage``'s reply, and the triage an
alert thread posts (one renderer, so the two never disagree)."""

from __future__ import annotations

from services import format as fmt
from services.estate import estimate
from services.estate.model import CanonicalState, StatusCount
from services.estate.model import Triage as TriageResult
from services.message import Block, Fields, Heading, Message, Table, Text


def triage_message(t: TriageResult) -> Message:
    unit, what = t.unit, t.dead_title
    scope = f" queued in the last {fmt.age(t.taken_at - t.since)}" if t.since else ""
    # One meaning: dead letters are what /queue dlq lists and a redrive takes out, broken
    # out by the statuses (and, where a job is kept apart, the job statuses) they are in.
    dead = t.dead_letters
    parts = _dead_letter_parts(t)
    total = fmt.count_of(t.total, t.total_estimated)
    summary = (
        f"Queue {t.queue}: {total} {unit}{scope}; {fmt.count(dead)} dead "
        f"letters{f' ({parts})' if parts else ''}, {fmt.count(t.stuck)} stuck, oldest "
        f"pending {fmt.age(t.oldest_pending_age)}"
    )
    fields = [
        (f"{unit}{scope}", total),
        ("dead letters", fmt.count(dead) + (f" ({parts})" if parts else "")),
        ("oldest pending", fmt.age(t.oldest_pending_age)),
        ("stuck", fmt.count(t.stuck)),
    ]
    if t.duplicates_detected:  # else the notes say why, and a count would be untrue
        fields.append(("duplicates", _duplicates(t)))
    blocks: list[Block] = [
        Heading(f"Triage: queue {t.queue} ({t.profile}), {fmt.when(t.taken_at)}"),
        Fields(tuple(fields)),
        _status_table(t.status_title, t.by_status, t.total),
    ]
    if t.by_job_status:
        jobs = sum(s.count for s in t.by_job_status)
        blocks.append(_status_table("job status", t.by_job_status, jobs))
    estimated = [s for s in (*t.by_status, *t.by_job_status) if s.estimated]
    if t.by_reason:
        blocks.append(
            Table(
                ("failure_reason", "rows"),
                tuple((c.key, fmt.count(c.count)) for c in t.by_reason),
                title=f"{what} by failure_reason",
                numeric=(1,),
            )
        )
    if t.by_signature:
        blocks.append(
            Table(
                ("rows", "signature"),
                tuple((fmt.count(c.count), c.key) for c in t.by_signature),
                title=f"{what} by error signature, top 10 {_sample_scope(t)}",
                numeric=(0,),
            )
        )
        shown = sum(c.count for c in t.by_signature)
        blocks.extend(_left_out(t, len(t.by_signature), t.signature_groups, "signatures", shown))
    if t.by_type:
        states = [s for s in CanonicalState if any(s in tc.by_state for tc in t.by_type)]
        blocks.append(
            Table(
                (t.type_title, "total", *[s.value for s in states]),
                tuple(
                    (
                        tc.key,
                        fmt.count_of(tc.total, bool(tc.estimated)),
                        *[fmt.count_of(tc.by_state.get(s, 0), s in tc.estimated) for s in states],
                    )
                    for tc in t.by_type
                ),
                title=(
                    f"{what} by {t.type_title}, top 10 {scope}"
                    if t.by_type_dead_only
                    else f"By {t.type_title}"
                    + (
                        ", succeeded rows left out (estimated above)"
                        if estimated and not t.sampled_rows
                        else ""
                    )
                ),
                numeric=tuple(range(1, len(states) + 2)),
            )
        )
        if t.by_type_dead_only:  # the sample's, cut to its top
            shown = sum(tc.total for tc in t.by_type)
            title = t.type_title if t.type_title.endswith("s") else f"{t.type_title}s"
            blocks.extend(_left_out(t, len(t.by_type), t.type_groups, title, shown))
    if estimated and t.sampled_rows:
        blocks.append(Text(_sampled_note(t, [s.status for s in estimated])))
    elif estimated:
        which = " and ".join(f"{s.status}" for s in estimated)
        blocks.append(
            Text(
                f"≈ marks an estimate: on a table this large the {which} rows are not "
                "counted but estimated from PostgreSQL's statistics. Every other count is "
                "exact. To count them too: /queue triage --exact"
            )
        )
    if t.notes:
        blocks.append(Text("Not shown: " + "; ".join(t.notes)))
    hints = _next_steps(t, dead)
    if hints:
        blocks.append(Text("Next: " + " · ".join(hints)))
    return Message(summary, tuple(blocks))


def _sampled_note(t: TriageResult, which: list[str]) -> str:
    """What a count from a sample is, how far off it may be, and what is exact."""
    errors = ", ".join(
        f"{name} ±{100 * t.sample_errors[name]:.1f}%" for name in which if name in t.sample_errors
    )
    return (
        f"≈ marks an estimate: on a table this large the {' and '.join(which)} jobs (in "
        f"all and by {t.type_title}) are counted in a sample of {fmt.count(t.sampled_rows)} "
        f"of about {fmt.count(estimate.rounded(t.sampled_of))} jobs "
        f"({t.sampled_percent:.3g}% of the table's pages), not one by one"
        + (
            f": {errors} (one standard error, measured from how the sampled pages differ; "
            "a count by job type, being smaller, errs more)"
            if errors
            else ""
        )
        + ". The dead and running jobs, the stuck count and the oldest pending job are "
        "exact. To count every job: /queue triage --exact"
    )


def _dead_letter_parts(t: TriageResult) -> str:
    """e.g. "21 failed, 3 failed_permanently", or "30 DLQ; their jobs: 30 FAILED"."""
    if not t.dead_letters:
        return ""
    parts = ", ".join(f"{fmt.count(s.count)} {s.status}" for s in t.dead_letter_parts)
    if t.dead_letter_jobs:
        jobs = ", ".join(f"{fmt.count(s.count)} {s.status}" for s in t.dead_letter_jobs)
        parts += f"; their jobs: {jobs}"
    return parts


def _sample_scope(t: TriageResult) -> str:
    if t.signatures_of < t.signatures_total:
        return (
            f"in the newest {fmt.count(t.signatures_of)} of "
            f"{fmt.count(t.signatures_total)} (list them all: /queue dlq --error-like)"
        )
    return f"of all {fmt.count(t.signatures_total)}"


def _left_out(t: TriageResult, listed: int, groups: int, what: str, shown: int) -> list[Text]:
    """What a breakdown of the newest dead rows leaves out, where it is cut (the sample's
    rows, where triage groups only the newest)."""
    unit = "sampled dead letters" if t.signatures_of < t.signatures_total else "dead letters"
    line = fmt.left_out(
        listed, groups, what, rest=t.signatures_of - shown, whole=t.signatures_of, unit=unit
    )
    return [Text(line)] if line else []


def _duplicates(t: TriageResult) -> str:
    text = f"{t.duplicate_groups} {t.duplicate_label}"
    if t.duplicates_of_active:
        text += f", {t.duplicates_of_active} queued beside an active row"
    return text


def _status_table(title: str, rows: list[StatusCount], total: int) -> Table:
    guessed = any(s.estimated for s in rows)  # then every share is of an estimated total
    return Table(
        (title, "state", "rows", "share"),
        tuple(
            (
                s.status,
                s.canonical.value,
                fmt.count_of(s.count, s.estimated),
                fmt.share(s.count, total, estimated=guessed),
            )
            for s in rows
        ),
        title=f"By {title}",
        numeric=(2, 3),
    )


def _next_steps(t: TriageResult, broken: int) -> list[str]:
    queue = f" --queue {t.queue}"
    hints = []
    if broken:
        hints.append(f"/queue dlq{queue}")
    if t.stuck:
        hints.append(f"/queue stuck{queue}")
    return hints
