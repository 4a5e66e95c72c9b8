"""A privilege the runtime role lacks on a queue table is found by `config check`, for
each change kind that needs it, and at run time is one line naming the GRANT, never a
traceback (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import cli
from bot.bootstrap import build_app
from bot.demo import DEMO_CONFIG
from services.config import load_config
from services.errors import QueuebotError
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from tests.helpers.people import ALICE, BOB
from tests.integration.test_runtime_role import QUEUE_TABLES, Roles, grant, roles
from tests.kinds import ChangeKind

pytestmark = pytest.mark.postgres
__all__ = ["roles"]  # the fixture


async def config_check(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> tuple[Path, tuple[str, str]]:
    """`queuebot config check` of the demo configuration as the runtime role, which finds
    a problem: the configuration file, and what the check wrote (out, err)."""
    config_path = tmp_path / "queuebot.toml"
    config_path.write_text(DEMO_CONFIG.format(config=config_path))
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", roles.runtime_url)
    monkeypatch.setenv("QUEUEBOT_CONFIG", str(config_path))
    capsys.readouterr()
    assert await cli.run(cli.parse(["config", "check"])) == 1
    said = capsys.readouterr()
    return config_path, (said.out, said.err)


async def test_a_revoked_update_is_found_by_config_check_and_named_at_approval(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0
    who = f'"{roles.role}"'
    async with roles.owner.begin() as conn:  # the team grants on its queue tables, but UPDATE
        for table in QUEUE_TABLES:
            await conn.exec_driver_sql(f'GRANT SELECT, INSERT, UPDATE ON "{table}" TO {who}')
        await conn.exec_driver_sql(f"REVOKE UPDATE ON dev_r_worker_queue FROM {who}")
    config_path, (_, err) = await config_check(roles, monkeypatch, tmp_path, capsys)
    assert (
        f"problem: queue 'workers' (worker_queue): role '{roles.role}' lacks the UPDATE "
        "privilege on table 'dev_r_worker_queue' (column status), which requeue, redrive and "
        "cancel need: approving one would fail; the table's owner grants it (GRANT UPDATE ON "
        f"dev_r_worker_queue TO {roles.role})\n"
    ) in err, err
    assert "queue 'clips'" not in err

    app = await build_app(
        load_config(config_path, environ={"QUEUEBOT_DATABASE_URL": roles.runtime_url})
    )
    try:
        failed = await app.router.deps.reads.list_dead(queue="workers", filters=DeadFilter(limit=2))
        view = await app.changes.request(
            kind=ChangeKind.REQUEUE,
            queue="workers",
            selector=Selector(ids=tuple(r.id for r in failed.rows)),
            reason="allowlist fixed",
            actor=ALICE,
        )
        with pytest.raises(QueuebotError) as refused:
            await app.changes.approve(number=view.number, actor=BOB)
        said = refused.value.message
        assert "\n" not in said
        assert said == (
            f"nothing was changed (CR-{view.number}): permission denied for table "
            f"dev_r_worker_queue: role '{roles.role}' lacks the UPDATE privilege on it; its "
            f"owner grants it (GRANT UPDATE ON dev_r_worker_queue TO {roles.role}); "
            "`queuebot config check` lists every privilege the configured queues need"
        )
        assert (await app.changes.get(number=view.number)).state.value == "pending"
    finally:
        await app.close()


async def test_config_check_names_every_privilege_a_role_without_grants_lacks(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A role granted queuebot's own tables and nothing on the queue's: config check says
    the tables are there but not readable, and names SELECT on each, as /readyz does,
    beside the UPDATE and INSERT the changes need."""
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0
    _, (out, err) = await config_check(roles, monkeypatch, tmp_path, capsys)
    role = roles.role
    assert "queue workers (worker_queue): tables dev_r_worker_queue ok" not in out, out
    assert (
        "queue workers (worker_queue): tables dev_r_worker_queue found, not readable by "
        f"role '{role}'"
    ) in out, out
    assert (
        f"problem: queue 'workers' (worker_queue): role '{role}' lacks the SELECT privilege "
        "on table 'dev_r_worker_queue', so the queue cannot be read; the table's owner "
        f"grants it (GRANT SELECT ON dev_r_worker_queue TO {role})\n"
    ) in err, err
    clips = _select_problem(err, "clips")
    for table in ("queue_messages", "clip_jobs", "job_events", "video_assets"):
        assert f"table {table!r}" in clips, err
    assert clips.endswith(
        "so the queue cannot be read; the tables' owner grants them (GRANT SELECT ON "
        f"queue_messages, clip_jobs, job_events, video_assets TO {role})"
    ), clips
    assert (
        f"problem: queue 'workers' (worker_queue): role '{role}' lacks the UPDATE privilege "
        "on table 'dev_r_worker_queue' (column status)"
    ) in err, err
    assert "lacks the INSERT privilege on table 'job_events'" in err, err


def _select_problem(err: str, queue: str) -> str:
    return next(
        line
        for line in err.splitlines()
        if line.startswith(f"problem: queue {queue!r}") and "SELECT" in line
    )
