"""The errors queuebot raises, each carrying the message a person should read.

::

    QueuebotError                 anything queuebot knows how to explain
     +-- UsageError               the input was malformed; carries the usage line to show
     +-- NotFound                 a job, request or incident that does not exist
     +-- PermissionDenied         the person lacks the role the command needs
     +-- Conflict                 the thing changed under us, or was already done
     +-- PreconditionFailed       a safety check refused the change
     +-- Unavailable              a database or platform could not be reached
     +-- ConfigError              the configuration file or environment is invalid
          +-- NotMigrated         queuebot's own tables are missing or at another revision

Some carry the facts of a cause instead of prose (``RequestDecided``, ``RequestExpired``,
``AlreadyApproved``, ``PlanActive``, ``PlanStateConflict``, ``ConcurrentChange`` under
Conflict; ``OwnRequest`` under PermissionDenied; ``ChecksFailed`` under PreconditionFailed;
``DatabaseUnavailable`` under Unavailable); ``commands/messages.py`` words them.

Foreign exceptions (SQLAlchemy, httpx, Slack, Discord) are translated into these at the
edge where they happen, with ``raise ... from exc``, so callers never see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime


class QueuebotError(Exception):
    """Base of every error queuebot can explain to a person."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(QueuebotError):
    """Malformed input. ``usage`` is the usage line of the command that was meant."""

    def __init__(self, message: str, *, usage: str | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class NotFound(QueuebotError):
    """The named job, request or incident does not exist."""


class PermissionDenied(QueuebotError):
    """The acting person lacks the role the command needs."""


class Conflict(QueuebotError):
    """The state changed under us, or the action was already taken."""


class OutOfOrder(Conflict):
    """A step asked for before the steps it rests on (an incident's restore order)."""


class NotReadyToResolve(Conflict):
    """An incident resolved before every validation item is done."""


class MeasuredFailing(Conflict):
    """A validation item queuebot measured as failing, confirmed by hand: that is an
    override another person approves."""


class PreconditionFailed(QueuebotError):
    """A safety check refused the change."""


class Unavailable(QueuebotError):
    """A dependency (database, chat platform) could not be reached."""


class ConfigError(QueuebotError):
    """The configuration file or the environment is invalid."""


class NotMigrated(ConfigError):
    """queuebot's own tables are not at the revision this version needs: missing or older
    (``queuebot db upgrade`` fixes it), or newer than this version knows."""


# -- structured causes -------------------------------------------------------------------
# Services raise these with the facts; commands/messages.py words them for people. The
# message each carries is a terse fallback for logs.


class RequestDecided(Conflict):
    """The change request was already executed or rejected."""

    def __init__(
        self,
        *,
        number: int,
        state: str,
        decided_at: datetime | None,
        approvers: Sequence[str] = (),
        changed: int = 0,
        skipped: int = 0,
        rejected_by: str | None = None,
        rejection_reason: str | None = None,
        withdrawn: bool = False,
    ) -> None:
        super().__init__(f"CR-{number} is already {'withdrawn' if withdrawn else state}")
        self.number = number
        self.state = state
        self.decided_at = decided_at
        self.approvers = tuple(approvers)
        self.changed = changed
        self.skipped = skipped
        self.rejected_by = rejected_by
        self.rejection_reason = rejection_reason
        self.withdrawn = withdrawn  # rejected by its own requester


class RequestExpired(Conflict):
    """The change request expired before it was approved."""

    def __init__(self, *, number: int, expired_at: datetime) -> None:
        super().__init__(f"CR-{number} expired")
        self.number = number
        self.expired_at = expired_at


class AlreadyApproved(Conflict):
    """This person already approved the request; it needs someone else."""

    def __init__(self, *, number: int, missing: int) -> None:
        super().__init__(f"CR-{number} already approved by this person")
        self.number = number
        self.missing = missing


class OwnRequest(PermissionDenied):
    """The two-person rule: a requester cannot approve their own request."""

    def __init__(self, *, number: int) -> None:
        super().__init__(f"CR-{number} cannot be approved by its requester")
        self.number = number


class PlanActive(Conflict):
    """The queue already has a running or halted plan: one plan per queue."""

    def __init__(self, *, queue: str, plan: int) -> None:
        super().__init__(f"queue {queue} already has an active plan P-{plan}")
        self.queue = queue
        self.plan = plan


class PlanStateConflict(Conflict):
    """The plan is not in a state the action needs."""

    def __init__(self, *, number: int, state: str, needed: tuple[str, ...], action: str) -> None:
        super().__init__(f"P-{number} is {state}; {action} needs {' or '.join(needed)}")
        self.number = number
        self.state = state
        self.needed = needed
        self.action = action


class ConcurrentChange(Conflict):
    """Another request changed the same thing at the same moment; nothing was done."""

    def __init__(self, *, subject: str) -> None:
        super().__init__(f"{subject} changed concurrently; nothing was done")
        self.subject = subject


class DatabaseUnavailable(Unavailable):
    """A database failed during a change. ``committed`` says what is known: False when
    the transaction was rolled back (nothing changed), None when the failure came while
    committing (the change may or may not have been saved)."""

    def __init__(self, *, database: str, detail: str, committed: bool | None) -> None:
        super().__init__(f"database {database} unavailable ({detail})")
        self.database = database
        self.detail = detail
        self.committed = committed


class ChecksFailed(PreconditionFailed):
    """A change refused by its preconditions: what refused it (``refusal``, e.g. "plan
    refused: source object exists: ...") and every check as (name, verdict, detail), the
    rows a preview shows, so a reply can print them as the preview's table."""

    def __init__(self, *, refusal: str, checks: Sequence[tuple[str, str, str]]) -> None:
        listed = "; ".join(f"{name}: {verdict} ({detail})" for name, verdict, detail in checks)
        super().__init__(f"{refusal}. All checks: {listed}")
        self.refusal = refusal
        self.checks = list(checks)
