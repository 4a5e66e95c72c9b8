"""config check knows an index on a preset's dead jobs by its WHERE as PostgreSQL keeps it
(``pg_get_expr``), which is not how queuebot prints it: casts added, parentheses around
each term, ``IN`` of one value kept as ``=`` and of several as ``= ANY (ARRAY[...])``."""

from __future__ import annotations

from services.estate.system.dead_index import DeadIndex, matching


def _index(where: str) -> DeadIndex:
    return DeadIndex("qb_job_dead", "pgboss.job", ("name",), where, "pg-boss", "reads")


def test_an_index_is_known_by_its_where_as_postgresql_keeps_it() -> None:
    cases = [
        ("state IN ('failed')", "(state = 'failed'::pgboss.job_state)"),
        (
            "state IN ('failed', 'cancelled')",
            "(state = ANY (ARRAY['failed'::pgboss.job_state, 'cancelled'::pgboss.job_state]))",
        ),
        (
            "attempts >= max_attempts AND locked_at IS NULL",
            "((locked_at IS NULL) AND (attempts >= max_attempts))",
        ),
        (
            "finished_at IS NOT NULL AND error IS NOT NULL",
            "((finished_at IS NOT NULL) AND (error IS NOT NULL))",
        ),
        ('"Expired_At" IS NOT NULL', '("Expired_At" IS NOT NULL)'),
    ]
    for ours, kept in cases:
        assert matching(_index(ours), [("by_hand", True, kept)]) == ["by_hand"], ours


def test_another_where_or_none_is_not_it_and_its_name_is() -> None:
    index = _index("state IN ('failed')")
    found = [
        ("job_i5", True, "(state < 'active'::pgboss.job_state)"),
        ("job_pkey", True, None),
        ("two_states", True, "(state = ANY (ARRAY['failed'::pgboss.job_state, 'retry'::x]))"),
    ]
    assert matching(index, found) == []
    # its own name, whatever its WHERE; a valid one before one that is not
    found += [("qb_job_dead", False, None), ("by_hand", True, "(state = 'failed'::text)")]
    assert matching(index, found) == ["by_hand", "qb_job_dead (not valid)"]
