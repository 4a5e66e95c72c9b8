"""``[database]``: how long queuebot waits for PostgreSQL before it says the database is
away, on every connection it makes (serve, its worker, the command line).

A database that refuses connections fails at once; one behind a network partition, or
behind a proxy whose database is gone, answers nothing, and without these bounds each
statement would wait for the whole outage. The settings go to PostgreSQL itself
(``statement_timeout``, ``lock_timeout``, ``idle_in_transaction_session_timeout`` and
its own TCP keepalives, so that it ends the sessions of a client it lost and frees their
locks) and to libpq (``connect_timeout``, TCP keepalives and ``tcp_user_timeout``, which
see a path that stopped carrying packets). Neither sees a peer that keeps TCP alive and
answers nothing (a proxy whose database is gone), so queuebot also closes a connection
that has not answered within ``statement_timeout_seconds`` plus two seconds
(services/db/bounds.py). Migrations (`queuebot db upgrade`, and serve's own at start)
are exempt from the statement and lock timeouts and from that bound. docs/reliability.md
("A database that stops answering") says why each default is what it is.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from services.config.sections import Strict


class DatabaseConfig(Strict):
    """Timeouts and keepalives of every PostgreSQL connection queuebot opens (SQLite, a
    local file, has no use for them). A parameter written in the database URL itself
    (``?connect_timeout=20``, ``?options=-c statement_timeout=60s``) wins over these."""

    connect_timeout_seconds: int = Field(default=5, ge=2, le=120)
    statement_timeout_seconds: float = Field(default=10.0, ge=1, le=3600)
    lock_timeout_seconds: float = Field(default=8.0, ge=0.1, le=3600)
    idle_in_transaction_timeout_seconds: float = Field(default=20.0, ge=1, le=3600)
    keepalives_idle_seconds: int = Field(default=4, ge=1, le=3600)
    keepalives_interval_seconds: int = Field(default=2, ge=1, le=600)
    keepalives_count: int = Field(default=3, ge=1, le=20)
    tcp_user_timeout_seconds: int = Field(default=10, ge=1, le=3600)

    @model_validator(mode="after")
    def _lock_within_statement(self) -> DatabaseConfig:
        if self.lock_timeout_seconds > self.statement_timeout_seconds:
            raise ValueError(
                f"lock_timeout_seconds ({self.lock_timeout_seconds:g}) must not be longer than "
                f"statement_timeout_seconds ({self.statement_timeout_seconds:g}): a statement "
                "waiting for a lock is stopped by its statement timeout first"
            )
        return self

    @property
    def answer_within(self) -> float:
        """Seconds queuebot waits for any answer on a connection before it closes it: the
        statement timeout, plus time for PostgreSQL's own "canceling statement" to come
        back, so that a live database is never cut off before it can say so."""
        return self.statement_timeout_seconds + 2.0
