"""Appending many audit events at once (``append_many``: a batch of missed deadlines,
say) makes the same chain one ``append`` after another would: every event follows the
one before it, the head names the newest, ``verify`` passes, keyed or not; and a keyed
trail still refuses a writer without its key."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from services.audit import Actor, AuditKeyMissing, AuditTrail, NewEvent
from services.db import create_engine
from services.db.migrate import upgrade
from tests.integration.test_runtime_role import Roles, grant, roles  # noqa: F401 - a fixture

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SYSTEM = Actor.system("test")


def events(count: int, start: int = 0) -> list[NewEvent]:
    return [
        NewEvent(
            action="test.happened",
            actor=SYSTEM,
            at=AT,
            subject=f"S-{start + n}",
            details={"n": start + n},
        )
        for n in range(count)
    ]


@pytest.mark.parametrize("key", [None, "k" * 32])
async def test_a_batch_onto_an_empty_and_a_grown_trail_verifies(
    db_url: str, key: str | None
) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    trail = AuditTrail(key=SecretStr(key) if key else None)
    try:
        async with engine.begin() as conn:
            first = await trail.append_many(conn, events(20))  # the trail's first events
        async with engine.begin() as conn:
            one = await trail.append(conn, action="test.one", actor=SYSTEM, at=AT)
        async with engine.begin() as conn:
            more = await trail.append_many(conn, events(30, start=20))
        assert first == sorted(first) and more == sorted(more)
        assert first[-1] < one < more[0]
        async with engine.connect() as conn:
            subjects = (
                await conn.execute(sa.text("SELECT subject FROM qb_audit_events ORDER BY id"))
            ).scalars()
            assert list(subjects) == [f"S-{n}" for n in range(20)] + [None] + [
                f"S-{n}" for n in range(20, 50)
            ]
            head = await trail.head(conn)
            assert head is not None and head.event == more[-1]
            verified = await trail.verify(conn)
        assert verified.ok, verified.problem
        assert verified.checked == 51 and verified.keyed == (51 if key else 0)
    finally:
        await engine.dispose()


async def test_a_batch_onto_a_keyed_trail_without_the_key_is_refused(db_url: str) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    try:
        async with engine.begin() as conn:
            await AuditTrail(key=SecretStr("k" * 32)).append_many(conn, events(3))
        with pytest.raises(AuditKeyMissing):
            async with engine.begin() as conn:
                await AuditTrail().append_many(conn, events(3, start=3))
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM qb_audit_events"))).scalar()
        assert count == 3
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_the_runtime_role_appends_a_batch(
    roles: Roles,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """serve and console run as a role that is not the tables' owner (``queuebot db
    grant``): its privileges are enough for a batch, and the batch verifies."""
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0
    trail = AuditTrail(key=SecretStr("k" * 32))
    async with roles.runtime.begin() as conn:
        await trail.append_many(conn, events(2))
    async with roles.runtime.begin() as conn:
        await trail.append_many(conn, events(40, start=2))
    async with roles.runtime.connect() as conn:
        verified = await trail.verify(conn)
    assert verified.ok and verified.checked == 42, verified.problem
