"""A privilege the database refused is one line naming the fix (issue 26)."""

from __future__ import annotations

from services.privileges import refused


def test_a_queue_table_names_the_grant_for_the_statement() -> None:
    said = refused(
        sqlstate="42501",
        said="permission denied for table jobs",
        statement="SELECT jobs.id FROM jobs WHERE jobs.id IN (1) FOR UPDATE",
        role="qb_runtime",
        subject="CR-3",
    )
    assert said is not None
    assert said.message == (
        "nothing was changed (CR-3): permission denied for table jobs: role 'qb_runtime' "
        "lacks the UPDATE privilege on it; its owner grants it (GRANT UPDATE ON jobs TO "
        "qb_runtime); `queuebot config check` lists every privilege the configured queues need"
    )


def test_queuebots_own_table_points_at_db_grant() -> None:
    said = refused(
        sqlstate="42501",
        said="permission denied for table qb_approvals",
        statement="INSERT INTO qb_approvals (request_id) VALUES (1)",
        role="qb_runtime",
        subject="CR-3",
    )
    assert said is not None
    assert "`queuebot db grant qb_runtime --apply`, run as the owner" in said.message


def test_another_failure_is_not_a_privilege() -> None:
    assert (
        refused(sqlstate="23505", said="duplicate key", statement="", role=None, subject="x")
        is None
    )
