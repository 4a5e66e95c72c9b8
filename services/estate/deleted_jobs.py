"""What a redriven job whose row left the queue's table means: the one rule a staged
redrive settles such a job by, and what ``config check`` says of it.

A job that leaves the table succeeded only where whatever deletes jobs deletes only those
that succeeded. That is a fact of some systems (graphile-worker and Que delete a job when
it succeeds, and keep a failed one), fixed in their presets (``success_deletes``). Where the
system's workers decide, as Procrastinate's ``--delete-jobs`` does, the team says it of
the queue (``deleted_jobs = "succeeded"``). Anywhere else a job that left the table may
have failed as well as succeeded: its outcome is unknown, and a plan counts it so.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.config import QueueConfig
from services.errors import ConfigError

KEY = "deleted_jobs"
SUCCEEDED = "succeeded"
UNKNOWN = "unknown"
# What may delete a queue's rows, where the profile says nothing more precise.
SOMETHING_ELSE = (
    "whatever deletes rows of this table, a clean-up or a worker, may delete failed jobs too"
)


@dataclass(frozen=True)
class DeletedJobs:
    """The rule on one queue: whether a job that left the table succeeded, why, and (where
    its outcome is unknown) the setting that would say otherwise."""

    succeeded: bool
    because: str
    setting: str | None = None

    def line(self) -> str:
        """``config check``'s line: the assumption, and why."""
        if self.succeeded:
            return f"a job that leaves the table: succeeded ({self.because})"
        return (
            f"a job that leaves the table: outcome unknown, and a staged redrive halts on it "
            f"({self.because}); {self.setting}"
        )


def judge(*, queue: str, config: QueueConfig, system: str, fixed: bool, words: str) -> DeletedJobs:
    """The rule for a queue read through a profile: ``fixed`` where its system deletes only
    the jobs that succeeded (then nothing may be configured); ``words``: what deletes the
    queue's jobs, failed ones too, where it is not fixed."""
    key = config.key(KEY)
    if fixed:
        if config.deleted_jobs is not None:
            raise ConfigError(
                f"{key}: queue {queue!r} ({system}) needs no {KEY}: {system} deletes a job "
                "only when it succeeds, so a job that left its table succeeded; remove the key"
            )
        return DeletedJobs(True, f"{system} deletes a job only when it succeeds")
    if config.deleted_jobs == SUCCEEDED:
        return DeletedJobs(
            True,
            f'{key} = "{SUCCEEDED}": this queue\'s workers delete a job only when it succeeded',
        )
    setting = f'set {key} = "{SUCCEEDED}" if this queue\'s workers delete only jobs that succeeded'
    said = f'; {key} = "{UNKNOWN}"' if config.deleted_jobs == UNKNOWN else ""
    return DeletedJobs(False, words + said, setting)
