"""``queuebot runbook check`` as a real process: an ok line per runbook that holds, every
problem with its file and JSON path, exit 0 / 1 / 2; and the console's /incident
runbooks over a configured folder of runbooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.demo import DEMO_CONFIG
from tests.e2e.serving import demo_database
from tests.e2e.test_console import queuebot, replies

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runbooks" / "queue-loss-original.json"


def original() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text("utf-8"))
    return data


def runbook_file(path: Path, statement: dict[str, Any], title: str = "Our runbook") -> Path:
    body = json.dumps(statement, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {title}\n\nProse.\n\n<!-- oshun:runbook -->\n```json\n{body}\n```\n")
    return path


def broken(path: Path) -> Path:
    data = original()
    data["communications"][1]["withinMs"] = -5
    data["restoreOrder"] = ["dep:nowhere", "dep:job-queue"]
    del data["failback"]
    return runbook_file(path, data)


def test_with_no_file_the_shipped_runbooks_are_checked(tmp_path: Path) -> None:
    result = queuebot("runbook", "check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "ok shipped/dlq-redrive.md: runbook:dlq-redrive (scenario gd:dlq-redrive, version 2): "
        "operators within 10 min, actors within 1 h",
        "ok shipped/failed-jobs-accumulating.md: runbook:failed-jobs-accumulating (scenario "
        "gd:failed-jobs-accumulating, version 2): operators within 15 min",
        "ok shipped/queue-loss.md: runbook:queue-loss (scenario gd:queue-loss, version 1): "
        "actors within 15 min, operators within 5 min",
        "runbook check: 3 runbook(s) ok",
    ]
    assert result.stderr == ""


def test_the_original_statement_and_a_folder_pass(tmp_path: Path) -> None:
    one = runbook_file(tmp_path / "one.md", original())
    folder = tmp_path / "more"
    runbook_file(folder / "a.md", {**original(), "id": "runbook:a", "scenarioId": "ops:a"})
    runbook_file(folder / "b.md", {**original(), "id": "runbook:b", "scenarioId": "ops:b"})
    result = queuebot("runbook", "check", str(one), str(folder), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"ok {one}: runbook:v1-queue-loss (scenario gd:queue-loss, version 1): "
        "actors within 15 min, operators within 5 min"
    )
    assert lines[1].startswith(f"ok {folder / 'a.md'}: runbook:a (scenario ops:a")
    assert lines[2].startswith(f"ok {folder / 'b.md'}: runbook:b (scenario ops:b")
    assert lines[3] == "runbook check: 3 runbook(s) ok"


def test_a_broken_runbook_is_every_problem_with_its_path_and_exit_1(tmp_path: Path) -> None:
    good = runbook_file(tmp_path / "good.md", original())
    bad = broken(tmp_path / "bad.md")
    empty = tmp_path / "notes.md"
    empty.write_text("# Notes\n\nNo statement here.\n")
    result = queuebot("runbook", "check", str(good), str(bad), str(empty), cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines() == [
        f"ok {good}: runbook:v1-queue-loss (scenario gd:queue-loss, version 1): "
        "actors within 15 min, operators within 5 min"
    ]
    assert result.stderr.splitlines() == [
        f"{bad}: communications[1].withinMs: must be a positive number of milliseconds, got -5",
        f"{bad}: failback: is required",
        f"{bad}: restoreOrder[0]: 'dep:nowhere' is not a known dependency (known: "
        "dep:blob-store, dep:job-queue, dep:job-worker-pool, dep:notification-channel, "
        "dep:primary-store); name it in dependencies if this runbook restores it",
        f"{empty}: no statement: the file has no <!-- oshun:runbook --> marker; put it on a "
        "line of its own, followed by the statement in a ```json block",
        "runbook check: 2 of 3 runbook(s) broken",
    ]


def test_invalid_json_is_named_by_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_text('# T\n\n<!-- oshun:runbook -->\n```json\n{\n  "id": "runbook:x",,\n}\n```\n')
    result = queuebot("runbook", "check", str(path), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"{path}: line 6, column 21: not valid JSON: Expecting property name enclosed in "
        "double quotes"
    )


def test_two_runbooks_of_one_scenario_clash(tmp_path: Path) -> None:
    a = runbook_file(tmp_path / "a.md", original())
    b = runbook_file(tmp_path / "b.md", {**original(), "id": "runbook:b"})
    result = queuebot("runbook", "check", str(a), str(b), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{b}: scenarioId: 'gd:queue-loss' is already the scenarioId of {a}; one runbook "
        "per scenarioId",
        "runbook check: 1 problem(s)",
    ]


def test_a_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    good = runbook_file(tmp_path / "good.md", original())
    missing = queuebot("runbook", "check", str(good), "nowhere.md", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == "queuebot: nowhere.md: no such file\n"
    (tmp_path / "empty").mkdir()
    folder = queuebot("runbook", "check", "empty", cwd=tmp_path)
    assert folder.returncode == 2
    assert folder.stderr == "queuebot: empty: no runbook files (*.md) in this folder\n"
    usage = queuebot("runbook", cwd=tmp_path)
    assert usage.returncode == 2
    assert usage.stderr == (
        "queuebot runbook: the following arguments are required: SUBCOMMAND "
        "(see `queuebot runbook --help`)\n"
    )


def test_with_no_file_the_configured_folder_is_checked_too(tmp_path: Path) -> None:
    ours = runbook_file(tmp_path / "runbooks" / "queue-loss.md", {**original(), "version": "2"})
    config = tmp_path / "queuebot.toml"
    config.write_text('[runbooks]\ndir = "runbooks"\n')
    result = queuebot("runbook", "check", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"ok {ours}: runbook:v1-queue-loss (scenario gd:queue-loss, version 2)" in result.stdout
    assert (
        f"{ours} replaces the shipped runbook of gd:queue-loss (shipped/queue-loss.md)"
        in result.stdout
    )
    assert "runbook check: 4 runbook(s) ok" in result.stdout

    broken(tmp_path / "runbooks" / "queue-loss.md")
    result = queuebot("runbook", "check", cwd=tmp_path, env={"QUEUEBOT_CONFIG": str(config)})
    assert result.returncode == 1
    assert f"{ours}: communications[1].withinMs: must be a positive number" in result.stderr


def test_with_no_file_an_alert_route_needs_a_runbook_for_its_scenario(tmp_path: Path) -> None:
    config = tmp_path / "queuebot.toml"
    config.write_text(
        '[channels.alerts]\nslack = "C0ALERTS"\n'
        '[[alerts.routes]]\nname = "loss"\nchannels = ["alerts"]\nscenario = "gd:queue-lost"\n'
    )
    result = queuebot("runbook", "check", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "alerts.routes.0 (loss): scenario 'gd:queue-lost' has no runbook (known: "
        "gd:dlq-redrive, gd:failed-jobs-accumulating, gd:queue-loss)",
        "runbook check: 1 problem(s)",
    ]


# ---------------------------------------------------------------------------------------
# The console


def test_console_lists_the_runbooks_of_the_configured_folder(tmp_path: Path) -> None:
    runbook_file(
        tmp_path / "runbooks" / "queue-loss.md",
        {**original(), "id": "runbook:our-queue-loss", "version": "3"},
        title="Our queue loss",
    )
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config) + '\n[runbooks]\ndir = "runbooks"\n')
    with demo_database("sqlite", tmp_path) as url:
        env = {"QUEUEBOT_DATABASE_URL": url, "QUEUEBOT_CONFIG": str(config)}
        lines = "/incident runbooks\n@dora /incident runbooks gd:dlq-redrive\n/incident help\n"
        result = queuebot("console", stdin=lines, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        out = replies(result.stdout)
        listing = out["/incident runbooks"]
        assert listing.startswith("== Runbooks (3) ==")
        assert "== gd:queue-loss: Our queue loss ==" in listing
        ours = tmp_path / "runbooks" / "queue-loss.md"
        assert f"runbook:our-queue-loss, version 3 ({ours})" in listing
        assert (
            "declared by: operations duty officer (production operations duty officer), "
            "queuebot role duty-officer: dora"
        ) in listing
        assert "told: operators within 5 min, actors within 15 min" in listing
        assert "restore order: dep:job-queue, then dep:job-worker-pool" in listing
        detail = out["@dora /incident runbooks gd:dlq-redrive"]
        assert "operators, within 10 min, over dep:notification-channel:" in detail
        assert "/incident runbooks [SCENARIO] [options]" in out["/incident help"]

        check = queuebot("config", "check", cwd=tmp_path, env=env)
        assert check.returncode == 0, check.stderr
        assert (
            "runbooks: gd:dlq-redrive, gd:failed-jobs-accumulating, gd:queue-loss "
            "(2 shipped, 1 from [runbooks] dir)\n"
        ) in check.stdout

        broken(tmp_path / "runbooks" / "queue-loss.md")
        refused = queuebot("console", stdin="/incident runbooks\n", cwd=tmp_path, env=env)
        assert refused.returncode == 2
        assert refused.stdout == ""  # refused before it touches a database or reads a line
        assert refused.stderr.splitlines()[:2] == [
            f"queuebot: {ours}: communications[1].withinMs: must be a positive number of "
            "milliseconds, got -5",
            f"{ours}: failback: is required",
        ]
