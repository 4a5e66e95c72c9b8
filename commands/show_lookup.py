"""Where ``/queue show ID`` looks. Named with ``--queue``, only there. Without it, in the
default queue (the first configured) and, when the job is not there and more queues are
configured, in the others: one that holds it is shown with a line saying so; several
that do are named, with how to choose; none, and the reply says every queue looked in.

``/queue show --args-like TEXT`` looks in one queue only, the named or the default one:
finding a job by its arguments reads every job of the queue, so it does not read every
queue's too on a guess; a reply with no match names the queues it did not look in."""

from __future__ import annotations

from dataclasses import dataclass

from commands.deps import QueueReader
from services.errors import NotFound, QueuebotError, UsageError
from services.estate.args_like import ArgsFound
from services.estate.model import JobDetail


@dataclass(frozen=True)
class ArgsLookup:
    """What ``/queue show --args-like`` found in ``queue``: the matches, the one job in
    full where there is exactly one, and the queues it did not look in."""

    queue: str
    found: ArgsFound
    job: JobDetail | None
    not_looked: list[str]


async def find_by_args(reads: QueueReader, *, queue: str | None, text: str) -> ArgsLookup:
    name = queue or reads.queue_names[0]
    found = await reads.find_by_args(queue=queue, text=text)
    job = None
    if found.counted == 1:  # shown as /queue show ID shows it
        job = await reads.show_job(queue=name, job_id=found.rows[0].id)
    others = [] if queue is not None else [q for q in reads.queue_names if q != name]
    return ArgsLookup(name, found, job, others)


async def find_job(
    reads: QueueReader, *, queue: str | None, job_id: str
) -> tuple[JobDetail, str | None]:
    """The job, and a note when it was found elsewhere than the default queue."""
    names = reads.queue_names
    if queue is not None or len(names) < 2:
        return await reads.show_job(queue=queue, job_id=job_id), None
    default, others = names[0], names[1:]
    try:
        return await reads.show_job(queue=None, job_id=job_id), None
    except (NotFound, UsageError) as exc:  # not there, or not an id that queue could hold
        missed: QueuebotError = exc
    found: list[JobDetail] = []
    for name in others:
        try:
            found.append(await reads.show_job(queue=name, job_id=job_id))
        except (NotFound, UsageError):
            continue
    if len(found) == 1:
        where = found[0].queue
        return found[
            0
        ], f"No job {job_id} in queue {default} (the default queue); found in queue {where}."
    if found:
        holding = ", ".join(d.queue for d in found)
        raise NotFound(
            f"no job {job_id} in queue {default!r} (the default queue); queues {holding} each "
            f"hold one: use /queue show {job_id} --queue NAME"
        )
    either = f"not in queue{'s' if len(others) > 1 else ''} {', '.join(others)} either"
    if isinstance(missed, UsageError):
        raise UsageError(f"{missed.message}; {either}", usage=missed.usage)
    raise NotFound(f"{missed.message}; {either}")
