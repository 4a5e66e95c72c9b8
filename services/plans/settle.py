"""Settling a wave: the outcome of each row a wave redrove, counted as the rows finish,
whatever the plan's state. A halt stops new waves, not the counting of those already out;
after a rollback the rows a worker had claimed are still counted as they finish. A job
whose rows left the table is counted by the queue's rule (``QueueProfile.deleted_jobs``):
succeeded where only successes are deleted, else its outcome is unknown.

Steps in the caller's transaction (they take its connection and never commit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.estate.deleted_jobs import DeletedJobs
from services.estate.ops import PlanOps
from services.estate.signature import (
    NO_ERROR,
    display_signature,
    earlier_signature,
    error_signature,
)
from services.plans import store
from services.plans.model import ItemState, PlanRow, Wave, WaveOutcome

SYSTEM = Actor.system("plan")


@dataclass(frozen=True)
class Settled:
    """A wave with its counts brought up to date (its outcome left as it was)."""

    wave: Wave
    open: int  # its rows still queued or running
    held: frozenset[str] = frozenset()  # the jobs of those rows
    redead: list[tuple[str, str | None]] = field(default_factory=list)  # (job, new error)
    signatures: dict[str, str] = field(default_factory=dict)  # of the dead-again jobs
    earlier: dict[str, str] = field(default_factory=dict)  # as an earlier version made them
    # the jobs this settling found gone from the table, their outcome unknown
    unknown: list[str] = field(default_factory=list)

    def same(self, job: str, error: str | None, frozen: str | None) -> bool:
        """Whether a dead-again job failed as its frozen row had: the same signature,
        made the same way (or, for a plan frozen before an upgrade, as it was made then:
        by the signature rules before ids of every shape were taken out, or on a table
        without failure_reason with its earlier label)."""
        if frozen is None:
            return False
        made = self.signature(job, error)
        kept = [made, *([self.earlier[job]] if job in self.earlier else [])]
        if frozen in kept:
            return True
        now, then = display_signature(error_signature(error)), earlier_signature(error)
        return then is not None and any(s.replace(now, then) == frozen for s in kept if now in s)

    def signature(self, job: str, error: str | None) -> str:
        """A dead-again job's failure signature, made as its frozen one was."""
        return self.signatures.get(job) or display_signature(error_signature(error))


@dataclass(frozen=True)
class HaltCause:
    """What a halt says of the jobs that died again: which failed as before, which with a
    new error, and which it cannot judge (no error text, now or when they were frozen)."""

    words: str
    same: list[str]
    new: list[str]
    unread: list[str]


def halt_cause(settled: Settled, originals: dict[str, str], no_error_text: str | None) -> HaltCause:
    """Whether the jobs that died again failed as before (the fix did not hold) or with a
    new error, each judged by its signature made as its frozen one was; never judged where
    no error text says it: where the system keeps none (``no_error_text``, the profile's
    words), or where none was recorded for the job, now or when it was frozen."""
    redead = settled.redead
    if no_error_text is not None:
        unread = [job for job, _ in redead]
    else:
        unread = [
            job
            for job, error in redead
            if _no_error(settled.signature(job, error)) or _no_error(originals.get(job))
        ]
    judged = [(job, error) for job, error in redead if job not in unread]
    same = [job for job, error in judged if settled.same(job, error, originals.get(job))]
    new = [job for job, _ in judged if job not in same]
    if not judged:
        they = "it" if len(unread) == 1 else "they"
        why = (
            no_error_text
            if no_error_text is not None
            else f"no error text was recorded for {'it' if they == 'it' else 'them'}"
        )
        look = "" if no_error_text is not None else ": look at the workers' logs"
        words = f"{why}, so whether {they} died of the same cause as before cannot be read here"
        return HaltCause(words + look, same, new, unread)
    words = _judged(settled, judged, same, originals)
    if unread:
        words += (
            f"; {len(unread)} more with no error text recorded, whose cause cannot be read "
            "here (look at the workers' logs)"
        )
    return HaltCause(words, same, new, unread)


def _judged(
    settled: Settled,
    judged: list[tuple[str, str | None]],
    same: list[str],
    originals: dict[str, str],
) -> str:
    if len(same) == len(judged):
        job, error = judged[0]
        return (
            f"the same signature as before: the fix did not hold "
            f"({settled.signature(job, error)!r})"
        )
    job, error = next((j, e) for j, e in judged if j not in same)
    new = f"now {settled.signature(job, error)!r}, was {originals.get(job)!r}"
    if not same:
        return f"a new error, not the one the plan was for: {new}"
    return (
        f"{len(same)} with the same signature as before (the fix did not hold for them), "
        f"{len(judged) - len(same)} with a new error: {new}"
    )


def _no_error(signature: str | None) -> bool:
    """Whether a signature says no error text was recorded: shown as such, or as an
    earlier version froze it on a table without failure_reason."""
    return signature is None or signature in (NO_ERROR, f"(no failure_reason): {NO_ERROR}")


async def settle(conn: AsyncConnection, ops: PlanOps, plan: int, wave: Wave) -> Settled:
    """Mark the wave's redriven rows that finished (succeeded or dead again) and count the
    wave's rows by where they are. A job with a row still out waits for its last row, so
    that a job's rows are judged together."""
    items = await store.items_in(conn, plan, state=ItemState.REDRIVEN, wave=wave.number)
    if not items:
        return Settled(wave, 0)
    status = await ops.wave_status(conn, items=store.refs(items))
    held = set(status.open_jobs)
    dead = [job for job, _ in status.redead if job not in held]
    redead = await store.mark(conn, plan, dead, ItemState.REDEAD, wave=wave.number)
    done = [job for job in status.succeeded if job not in held]
    succeeded = await store.mark(conn, plan, done, ItemState.SUCCEEDED, wave=wave.number)
    gone = [job for job in status.unknown if job not in held]
    unknown = await store.mark(conn, plan, gone, ItemState.UNKNOWN, wave=wave.number)
    # counted as the items move (no read of the wave's items again)
    counted = wave.model_copy(
        update={
            "succeeded": wave.succeeded + succeeded,
            "redead": wave.redead + redead,
            "unknown": wave.unknown + unknown,
        }
    )
    return Settled(
        counted,
        status.open,
        frozenset(held),
        list(status.redead),
        dict(status.signatures),
        dict(status.earlier_signatures),
        gone,
    )


def unknown_words(wave: Wave, jobs: int, rule: DeletedJobs, *, more: bool = False) -> str:
    """Why a halt on jobs of ``wave`` that left the table: their outcome is unknown, what
    may have deleted them, and the setting that says a job that left it succeeded."""
    return (
        f"{jobs:,} {'more ' if more else ''}of {wave.owner} jobs left the table, and this "
        f"queue's workers may delete failed jobs ({rule.because}): their outcome is "
        f"unknown; {rule.setting}"
    )


def completed_words(waves: Sequence[Wave]) -> str:
    """What a completed plan's note says of its waves."""
    redead = sum(w.redead for w in waves)
    unknown = sum(w.unknown for w in waves)
    if not redead and not unknown:
        return "every wave succeeded"
    done = "every wave done"
    if redead:
        done += f"; {redead} dead again"
    if unknown:
        done += f"; {unknown} left the table with their outcome unknown"
    return done


def finished(wave: Wave, now: datetime) -> Wave:
    """The wave, none of whose rows is out any more, as finished now: a wave still marked
    running ends ok, or halted when a row of it died again or left the table with its
    outcome unknown; a halted or rolled back wave keeps its outcome."""
    if wave.finished_at is not None:
        return wave
    outcome = wave.outcome
    if outcome is WaveOutcome.RUNNING:
        clean = wave.redead == 0 and wave.unknown == 0
        outcome = WaveOutcome.OK if clean else WaveOutcome.HALTED
    return wave.model_copy(update={"outcome": outcome, "finished_at": now})


async def record_finished(
    conn: AsyncConnection, audit: AuditTrail, plan: PlanRow, wave: Wave, now: datetime
) -> None:
    """A wave's ``plan.wave_finished`` event: how many of its rows succeeded, died again
    and left the table with their outcome unknown (each row's outcome is its plan item's
    state), whichever step saw its last row end (a tick, a rollback or a close)."""
    await audit.append(
        conn,
        action="plan.wave_finished",
        actor=SYSTEM,
        at=now,
        subject=plan.ref,
        queue=plan.queue,
        incident=plan.incident,
        details={
            "wave": wave.number,
            "succeeded": wave.succeeded,
            "redead": wave.redead,
            **({"unknown": wave.unknown} if wave.unknown else {}),
        },
    )
