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

Foreign exceptions (SQLAlchemy, httpx, Slack, Discord) are translated into these at the
edge where they happen, with ``raise ... from exc``, so callers never see them.
"""

from __future__ import annotations


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


class PreconditionFailed(QueuebotError):
    """A safety check refused the change."""


class Unavailable(QueuebotError):
    """A dependency (database, chat platform) could not be reached."""


class ConfigError(QueuebotError):
    """The configuration file or the environment is invalid."""
