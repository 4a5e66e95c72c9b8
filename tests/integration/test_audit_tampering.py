"""Tampering by someone with queuebot's database login, on a keyed trail: each attempt is
refused by the database, or `queuebot audit verify` says BROKEN and exits 1.

The attacker here may even be the tables' owner (who can disable the triggers) but does
not know QUEUEBOT_AUDIT_KEY, except where a test says so; anchors kept outside the
database catch what the key cannot.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from pydantic import SecretStr
from sqlalchemy.exc import DBAPIError

from bot import cli
from services.audit import (
    GENESIS,
    HMAC_SHA256,
    SHA256,
    Anchor,
    AuditKeyMissing,
    AuditTrail,
    Verification,
    event_hash,
    event_mac,
)
from services.db.tables import AuditEvent, AuditHead
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from tests.helpers.people import ALICE, BOB
from tests.integration.support import (
    Shop,
    add_dead_letters,
    build_services,
    five_events,
    simulated_worker,
)
from tests.kinds import ChangeKind

KEY = "queuebot-test-audit-key-0123456789abcdef"
ATTACKER_KEY = "not-the-key-but-just-as-long-0123456789abcdef"
EVENTS = cast(sa.Table, AuditEvent.__table__)
HEAD = cast(sa.Table, AuditHead.__table__)


def keyed(key: str | None = KEY) -> AuditTrail:
    return AuditTrail(key=SecretStr(key) if key else None)


def with_trail(shop: Shop, audit: AuditTrail) -> Shop:
    """The shop's services, appending to the trail through ``audit``."""
    shop.services = build_services(shop.engine, shop.estate, shop.clock, shop.notifier, audit=audit)
    shop.changes = shop.services.changes
    return shop


@pytest.fixture
async def trail(shop: Shop) -> Shop:
    """A keyed trail of five events."""
    await five_events(with_trail(shop, keyed()))
    return shop


# -- what an attacker with the database login does ------------------------------------------


async def unlock(shop: Shop) -> None:
    """Remove every guard of the audit tables (the owner may disable triggers; on SQLite,
    whoever can write the file can drop them)."""
    async with shop.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            for table in ("qb_audit_events", "qb_audit_head"):
                await conn.execute(sa.text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
            return
        names = await conn.execute(
            sa.text(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' "
                "AND tbl_name IN ('qb_audit_events', 'qb_audit_head')"
            )
        )
        for (name,) in names.all():
            await conn.execute(sa.text(f'DROP TRIGGER "{name}"'))


async def rewrite(
    shop: Shop,
    *,
    key: str | None,
    start: int,
    edit: dict[int, dict[str, Any]] | None = None,
    delete: Iterable[int] = (),
) -> None:
    """Delete events, edit others, and reseal every event from ``start`` on (with ``key``,
    or unkeyed sha256), so that each one follows the one before; repoint the head."""
    edit, gone = edit or {}, set(delete)
    async with shop.engine.begin() as conn:
        rows = [
            dict(r)
            for r in (await conn.execute(sa.select(EVENTS).order_by(EVENTS.c.id))).mappings()
        ]
        prev, last = GENESIS, 0
        for row in rows:
            if row["id"] in gone:
                await conn.execute(EVENTS.delete().where(EVENTS.c.id == row["id"]))
                continue
            if row["id"] >= start:
                row.update(edit.get(row["id"], {}), prev_hash=prev)
                if key is None:
                    row["scheme"], row["hash"] = SHA256, event_hash(row)
                else:
                    row["scheme"], row["hash"] = HMAC_SHA256, event_mac(row, key.encode())
                await conn.execute(
                    EVENTS.update()
                    .where(EVENTS.c.id == row["id"])
                    .values({k: v for k, v in row.items() if k != "id"})
                )
            prev, last = row["hash"], row["id"]
        await conn.execute(HEAD.update().values(last_id=last, last_hash=prev))


async def forget_request(shop: Shop, number: int) -> None:
    """Delete a change request, its decisions and its rows from the state tables too."""
    async with shop.engine.begin() as conn:
        await conn.execute(
            sa.text("DELETE FROM qb_change_items WHERE request_id = :n"), {"n": number}
        )
        await conn.execute(
            sa.text("DELETE FROM qb_change_outcomes WHERE request_id = :n"), {"n": number}
        )
        await conn.execute(sa.text("DELETE FROM qb_approvals WHERE request_id = :n"), {"n": number})
        await conn.execute(sa.text("DELETE FROM qb_change_requests WHERE id = :n"), {"n": number})


async def refused(shop: Shop, statement: str, match: str) -> None:
    with pytest.raises(DBAPIError, match=match):
        async with shop.engine.begin() as conn:
            await conn.execute(sa.text(statement))


# -- what the auditor runs ------------------------------------------------------------------


async def verify(shop: Shop, *anchors: Anchor, key: str | None = KEY) -> Verification:
    async with shop.engine.connect() as conn:
        return await keyed(key).verify(conn, anchors=anchors)


async def head(shop: Shop) -> Anchor:
    async with shop.engine.connect() as conn:
        anchor = await keyed().head(conn)
    assert anchor is not None
    return anchor


@pytest.fixture
def queuebot(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    """`queuebot ARGS...` in this process against the test database: (exit code, stdout,
    stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QUEUEBOT_CONFIG", raising=False)
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", db_url)

    async def run(*argv: str, key: str | None = KEY) -> tuple[int, str, str]:
        if key is None:
            monkeypatch.delenv("QUEUEBOT_AUDIT_KEY", raising=False)
        else:
            monkeypatch.setenv("QUEUEBOT_AUDIT_KEY", key)
        capsys.readouterr()
        code = await cli.run(cli.parse(list(argv)))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


# -- the trail as written -------------------------------------------------------------------


async def test_a_keyed_trail_verifies_and_its_head_is_an_anchor(trail: Shop, queuebot: Any) -> None:
    result = await verify(trail)
    assert (result.ok, result.checked, result.keyed, result.records) == (True, 5, 5, 4)
    code, anchor, _ = await queuebot("audit", "head")
    assert code == 0 and anchor.strip() == str(await head(trail))
    assert anchor.startswith("5:")
    code, out, err = await queuebot("audit", "verify", "--anchor", anchor.strip())
    assert (code, err) == (0, "")
    assert out == (
        "audit trail intact: 5 event(s) verified (5 keyed, 0 unkeyed), 1 of 1 anchor(s) held, "
        "4 request(s), approval(s) and plan(s) have their events, 0 incident(s) match theirs\n"
    )


async def test_an_anchor_file_holds_many_anchors(
    trail: Shop, queuebot: Any, tmp_path: Path
) -> None:
    async with trail.engine.connect() as conn:
        hashes = (await conn.execute(sa.text("SELECT id, hash FROM qb_audit_events"))).all()
    (tmp_path / "anchors").write_text(
        "# posted to #audit\n\n" + "".join(f"{n}:{h}\n" for n, h in hashes)
    )
    code, out, _ = await queuebot("audit", "verify", "--anchor-file", str(tmp_path / "anchors"))
    assert code == 0 and "5 of 5 anchor(s) held" in out
    code, _, err = await queuebot("audit", "verify", "--anchor", "5:nope")
    assert code == 2
    assert err.startswith("queuebot: anchor '5:nope' is not N:MAC") and err.count("\n") == 1


# -- tampering ------------------------------------------------------------------------------


async def test_an_edit_resealed_without_the_key_is_named(trail: Shop, queuebot: Any) -> None:
    await unlock(trail)
    await rewrite(trail, key=ATTACKER_KEY, start=3, edit={3: {"reason": "nothing to see"}})
    result = await verify(trail)
    assert (result.first_bad, result.checked) == (3, 2)
    assert result.problem == "event 3 was edited after it was written"
    code, out, err = await queuebot("audit", "verify")
    assert (code, out) == (1, "")
    assert err == (
        "audit trail BROKEN at event 3: event 3 was edited after it was written "
        "(2 event(s) before it verified)\n"
    )


async def test_without_a_key_the_same_edit_would_pass(shop: Shop) -> None:
    """Why the key: an unkeyed chain is recomputed by anyone who can write the table."""
    await five_events(shop)
    await unlock(shop)
    await rewrite(shop, key=None, start=3, edit={3: {"reason": "nothing to see"}})
    assert (await verify(shop, key=None)).ok


async def test_a_rewrite_with_the_key_is_caught_by_an_anchor(trail: Shop, queuebot: Any) -> None:
    anchor = await head(trail)  # kept outside the database before the attack
    await unlock(trail)
    await rewrite(trail, key=KEY, start=3, edit={3: {"reason": "nothing to see"}})
    assert (await verify(trail)).ok  # the key alone cannot tell
    result = await verify(trail, anchor)
    assert result.first_bad == 5
    assert result.problem == (
        f"event 5 does not match anchor {anchor.short}: the trail was rewritten (at event 5 "
        "or before it)"
    )
    code, _, err = await queuebot("audit", "verify", "--anchor", str(anchor))
    assert code == 1 and err.startswith("audit trail BROKEN at event 5: event 5 does not match")


async def test_truncate_is_refused_and_a_truncated_trail_is_caught(
    trail: Shop, queuebot: Any
) -> None:
    anchor = await head(trail)
    dialect = trail.engine.dialect.name
    if dialect == "postgresql":
        for statement in (
            "TRUNCATE qb_audit_events, qb_audit_head",
            "TRUNCATE qb_audit_head",
        ):
            await refused(trail, statement, "TRUNCATE refused")
    else:  # SQLite has no TRUNCATE; a DELETE of every row is refused
        await refused(trail, "DELETE FROM qb_audit_events", "append-only: DELETE refused")
        await refused(trail, "DELETE FROM qb_audit_head", "DELETE refused")
    assert (await verify(trail, anchor)).ok

    await unlock(trail)
    async with trail.engine.begin() as conn:
        if dialect == "postgresql":
            await conn.execute(sa.text("TRUNCATE qb_audit_events, qb_audit_head"))
        else:
            await conn.execute(sa.text("DELETE FROM qb_audit_events"))
            await conn.execute(sa.text("DELETE FROM qb_audit_head"))
    result = await verify(trail)  # the state tables still remember the requests
    assert result.problem is not None and result.first_bad is None
    assert result.problem.startswith(
        "the state tables record what the audit trail does not: CR-1 has no change.requested "
        "event; "
    )
    await forget_request(trail, 2)
    await forget_request(trail, 1)
    assert (await verify(trail)).ok  # nothing left to compare: only an anchor can tell
    result = await verify(trail, anchor)
    assert result.problem == (
        f"the audit trail is empty but anchor {anchor.short} says it had 5 event(s): it was "
        "truncated"
    )
    code, _, err = await queuebot("audit", "verify", "--anchor", str(anchor))
    assert code == 1
    assert err == f"audit trail BROKEN: {result.problem} (0 event(s) verified)\n"


async def test_a_deleted_tail_and_a_repointed_head(trail: Shop, queuebot: Any) -> None:
    anchor = await head(trail)
    await refused(trail, "DELETE FROM qb_audit_events WHERE id >= 4", "DELETE refused")
    await refused(trail, "DELETE FROM qb_audit_head", "DELETE refused")
    await refused(
        trail,
        "UPDATE qb_audit_head SET last_id = 3, "
        "last_hash = (SELECT hash FROM qb_audit_events WHERE id = 3)",
        "only moves forward",
    )
    await refused(trail, "UPDATE qb_audit_head SET last_id = 9", "qb_audit_head")
    assert (await verify(trail, anchor)).ok

    await unlock(trail)
    await rewrite(trail, key=ATTACKER_KEY, start=6, delete={4, 5})  # the head goes to 3
    result = await verify(trail)  # CR-2 is still in the state tables
    assert result.problem is not None
    assert "CR-2 has no change.requested event" in result.problem
    await forget_request(trail, 2)
    assert (await verify(trail)).ok  # consistent: only an anchor can tell
    result = await verify(trail, anchor)
    assert (result.first_bad, result.checked) == (5, 3)
    assert result.problem == (
        f"the chain ends at event 3 but anchor {anchor.short} names a later event: the newest "
        "events were deleted, or the trail was truncated"
    )
    code, _, err = await queuebot("audit", "verify", "--anchor", str(anchor))
    assert code == 1 and err.startswith("audit trail BROKEN at event 5: the chain ends at event 3")


async def test_a_downgrade_to_unkeyed_events_is_caught(trail: Shop, queuebot: Any) -> None:
    anchor = await head(trail)
    await unlock(trail)
    await rewrite(trail, key=None, start=4, edit={4: {"reason": "never asked"}})
    result = await verify(trail)
    assert result.first_bad == 4
    assert result.problem == (
        "event 4 is unkeyed (sha256) but follows keyed events: the trail was downgraded to "
        "rewrite it without the key"
    )
    code, _, err = await queuebot("audit", "verify")
    assert code == 1 and err.startswith("audit trail BROKEN at event 4: event 4 is unkeyed")
    code, out, err = await queuebot("audit", "verify", key=None)
    assert (code, out) == (3, "")
    assert err == (
        "queuebot: the audit trail is keyed (event 1 is sealed with HMAC-SHA256) but "
        "QUEUEBOT_AUDIT_KEY is not set: verifying it needs the key it was written with\n"
    )

    await rewrite(trail, key=None, start=1)  # every event unkeyed: no keyed event before
    result = await verify(trail)  # ... so only the request's row and an anchor can tell
    assert (result.first_bad, result.problem) == (
        None,
        "the state tables do not match the audit trail: qb_change_requests row 2 (CR-2): "
        "reason is 'fixed too' but its change.requested event 4 says 'never asked'",
    )
    assert (await verify(trail, anchor)).first_bad == 5


async def test_a_cut_approval_is_named_by_the_state_tables(trail: Shop, queuebot: Any) -> None:
    """Even with the key, an event cut out of the chain leaves its record behind."""
    await unlock(trail)
    await rewrite(trail, key=KEY, start=3, delete={2})  # bob's approval of CR-1
    result = await verify(trail)
    assert result.first_bad is None
    assert result.problem == (
        "the state tables record what the audit trail does not: CR-1 has no change.approved "
        "event; CR-1: bob's decision in qb_approvals has no change.approved event"
    )
    code, _, err = await queuebot("audit", "verify")
    assert code == 1
    assert err == f"audit trail BROKEN: {result.problem} (4 event(s) verified)\n"


async def test_a_cut_wave_is_named_by_its_plan(shop: Shop) -> None:
    from tests.integration.test_plans import flat_history, request_plan, tick

    with_trail(shop, keyed())
    await add_dead_letters(shop.engine, count=30, error="transcoder pod evicted")
    await flat_history(shop)
    number = await request_plan(shop)
    decision = await shop.changes.approve(number=number, actor=BOB)
    plan = decision.view.result.plan
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)  # the sample succeeded: wave 1 starts
    assert len((await shop.plans.view(number=plan)).waves) == 2
    result = await verify(shop)
    assert result.ok and result.records == 3  # the request, its approval, the plan

    async with shop.engine.connect() as conn:
        wave_1 = (
            await conn.execute(
                sa.text("SELECT max(id) FROM qb_audit_events WHERE action = 'plan.wave_started'")
            )
        ).scalar_one()
    await unlock(shop)
    await rewrite(shop, key=KEY, start=wave_1, delete={wave_1})
    result = await verify(shop)
    assert result.problem == (
        f"the state tables record what the audit trail does not: P-{plan} wave 1 has no "
        "plan.wave_started event"
    )


# -- keys over the life of a trail ----------------------------------------------------------


async def test_an_unkeyed_trail_goes_on_keyed_and_then_needs_its_key(
    shop: Shop, queuebot: Any
) -> None:
    await five_events(shop)  # written before anyone set a key
    unkeyed = shop.changes
    with_trail(shop, keyed())
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=6))
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=(dead.rows[5].id,)),
        reason="later",
        actor=ALICE,
    )
    result = await verify(shop)
    assert (result.ok, result.checked, result.keyed) == (True, 6, 1)
    code, out, _ = await queuebot("audit", "verify")
    assert code == 0 and "6 event(s) verified (1 keyed, 5 unkeyed)" in out

    with pytest.raises(AuditKeyMissing, match="appending to it needs the key"):
        await unkeyed.reject(number=3, actor=BOB, reason="no", may_reject_others=True)
    with pytest.raises(AuditKeyMissing, match="event 6 is sealed with HMAC-SHA256"):
        await verify(shop, key=None)
    async with shop.engine.connect() as conn:
        assert await keyed().key_problem(conn) is None
        assert "is not set" in (await keyed(None).key_problem(conn) or "")
        assert "does not match the newest audit event (6)" in (
            await keyed(ATTACKER_KEY).key_problem(conn) or ""
        )
    code, _, err = await queuebot("audit", "head", key=None)
    assert code == 3 and err.count("\n") == 1


# -- the rows a change request kept in the database -----------------------------------------


async def test_an_edited_frozen_row_is_named_by_its_requests_digest(
    trail: Shop, queuebot: Any
) -> None:
    """A request's rows live in qb_change_items, not in the trail; the trail seals their
    digest, so editing a frozen image (no trigger stops it) breaks the request's event."""
    assert (await verify(trail)).ok
    async with trail.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "UPDATE qb_change_items SET image = replace(image, 'DLQ', 'PENDING') "
                "WHERE request_id = 1 AND seq = 0"
            )
        )
    result = await verify(trail)
    assert result.first_bad == 1
    assert result.problem == (
        "CR-1's rows as frozen (qb_change_items) do not match the digest event 1 recorded "
        "(2 row(s); the table now gives 2): an item was edited, added or deleted"
    )
    code, _, err = await queuebot("audit", "verify")
    assert code == 1
    assert err.startswith("audit trail BROKEN at event 1: CR-1's rows as frozen")


async def test_a_forged_before_image_and_a_deleted_item_are_named(trail: Shop) -> None:
    async with trail.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "UPDATE qb_change_outcomes SET before = '{\"forged\": true}' "
                "WHERE request_id = 1 AND seq = 1"
            )
        )
    result = await verify(trail)
    assert result.first_bad == 3  # CR-1's change.executed
    assert result.problem is not None
    assert result.problem.startswith(
        "CR-1's rows from just before the change (qb_change_outcomes) do not match"
    )
    async with trail.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE qb_change_outcomes SET before = NULL WHERE request_id = 1 AND seq = 1")
        )
        await conn.execute(sa.text("DELETE FROM qb_change_items WHERE request_id = 2"))
    result = await verify(trail)
    assert result.first_bad == 4  # CR-2's change.requested
    assert result.problem == (
        "CR-2's rows as frozen (qb_change_items) do not match the digest event 4 recorded "
        "(2 row(s); the table now gives 0): an item was edited, added or deleted"
    )
