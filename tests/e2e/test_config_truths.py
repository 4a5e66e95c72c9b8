"""What `config check` and `serve` say of the chat setup (issue 26): alerts with no chat
platform are stored and posted nowhere, and say so; a Slack that can post but never hear
is refused unless posting only was chosen."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo import DEMO_CONFIG
from testkit import web
from testkit.ports import free_port
from tests.e2e.serving import ALERT_AUTH, demo_database, running_serve
from tests.e2e.test_console import queuebot
from tests.helpers.processes import clean_environ, interactive

BOT_TOKEN = "xoxb-secret-bot-token-1234"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "alertmanager"
NOWHERE = (
    "no chat platform is configured (neither SLACK_BOT_TOKEN nor DISCORD_BOT_TOKEN is set): "
    "alerts are stored but posted nowhere; set one to have them posted (`queuebot console` "
    "and the demo print the alerts their own process raises)"
)


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    workdir = tmp_path_factory.mktemp("truths")
    with demo_database("sqlite", workdir) as url:
        yield workdir, url


def check(workdir: Path, url: str, extra: str = "", **env: str) -> tuple[int, str, str]:
    config = workdir / "check.toml"
    config.write_text(DEMO_CONFIG.format(config=config) + extra)
    result = queuebot(
        "config",
        "check",
        cwd=workdir,
        env={"QUEUEBOT_DATABASE_URL": url, "QUEUEBOT_CONFIG": str(config), **env},
    )
    return result.returncode, result.stdout, result.stderr


def test_config_check_says_alerts_go_nowhere_without_a_chat_platform(
    demo_db: tuple[Path, str],
) -> None:
    code, out, err = check(*demo_db)
    assert code == 0, err
    assert f"warning: {NOWHERE}\n" in out


def test_config_check_refuses_a_slack_that_can_post_but_never_hear(
    demo_db: tuple[Path, str],
) -> None:
    code, out, err = check(*demo_db, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET="")
    assert code == 1
    assert (
        "problem: SLACK_BOT_TOKEN is set but SLACK_SIGNING_SECRET is empty and SLACK_APP_TOKEN "
        "is not set: set SLACK_SIGNING_SECRET for Slack's HTTP requests, or SLACK_APP_TOKEN for "
        "Socket Mode, or, to only post (the buttons in queuebot's posts then cannot be "
        "clicked), set [slack] posting_only = true" in err
    ), err
    assert "config check: ok" not in out


def test_posting_only_is_accepted_when_chosen_and_said(demo_db: tuple[Path, str]) -> None:
    code, out, err = check(*demo_db, "\n[slack]\nposting_only = true\n", SLACK_BOT_TOKEN=BOT_TOKEN)
    assert code == 0, err
    assert (
        "slack: posting only ([slack] posting_only = true): queuebot posts to Slack and "
        "takes no command or click from it, so its posts there carry no buttons\n"
    ) in out
    assert NOWHERE not in out


def test_posting_only_with_a_way_in_is_refused(demo_db: tuple[Path, str]) -> None:
    code, _, err = check(
        *demo_db,
        "\n[slack]\nposting_only = true\n",
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET="signing-secret-5678",
    )
    assert code == 1
    assert (
        "[slack] posting_only = true, but SLACK_SIGNING_SECRET is set: queuebot would take "
        "Slack's requests after all; unset it, or remove posting_only" in err
    ), err


def test_serve_says_alerts_go_nowhere_and_does_not_mark_them_posted(tmp_path: Path) -> None:
    workdir = tmp_path
    with demo_database("sqlite", workdir) as url, running_serve(workdir, url, {}) as served:
        served.wait_for_log(NOWHERE)
        payload = json.loads((FIXTURES / "firing.json").read_text())
        answer = web.post(
            f"{served.url}/alerts/alertmanager", json=payload, headers=ALERT_AUTH, timeout=10
        )
        assert answer.status_code == 200, answer.text
        db = url.split("///", 1)[1]
        rows: list[tuple[object, ...]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with sqlite3.connect(db) as conn:
                rows = conn.execute(
                    "SELECT done_at, last_error FROM qb_outbox WHERE kind = 'alert.post'"
                ).fetchall()
            if rows and all(done is not None for done, _ in rows):
                break
            time.sleep(0.1)
        assert rows
        for done, said in rows:
            assert done is not None  # closed: nothing is retried
            assert said == (
                "not posted: no chat platform is configured (neither SLACK_BOT_TOKEN "
                "nor DISCORD_BOT_TOKEN is set)"
            )


def test_serve_starts_posting_only_when_chosen_and_says_so(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/api/"  # nothing is posted in this test
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_BASE_URL": closed}
    with demo_database("sqlite", tmp_path) as url:
        extra = "\n[slack]\nposting_only = true\n"
        with running_serve(tmp_path, url, env, extra=extra) as served:
            served.wait_for_log(
                "Slack posting only ([slack] posting_only = true): queuebot posts to Slack "
                "and takes no command or click from it, so its posts there carry no buttons"
            )
            assert NOWHERE not in served.log.read_text()


def test_the_demo_prints_the_alerts_its_own_detectors_raise(tmp_path: Path) -> None:
    """With no chat platform, what config check promises holds: the demo (the console)
    prints the alerts its own process raises, in the alerts channel with their thread."""
    env = clean_environ()
    demo = interactive(
        "demo",
        "--no-worker",
        cwd=tmp_path,
        env={k: v for k, v in env.items() if not k.startswith("DISCORD_")},
        stderr=subprocess.DEVNULL,
    )
    stop = threading.Timer(60, demo.kill)  # the detector runs at start: seconds, not minutes
    stop.start()
    printed: list[str] = []
    try:
        assert demo.stdin is not None and demo.stdout is not None
        demo.stdin.write("/queue pending\n")
        demo.stdin.flush()
        for line in demo.stdout:
            printed.append(line)
            if "From: queuebot's own detector" in line:
                break
        demo.stdin.close()
        demo.wait(30)
    finally:
        stop.cancel()
        demo.kill()
    shown = "".join(printed)
    assert "[#alerts] (message " in shown, shown
    assert "== 🔴 FIRING: FailedJobsAccumulating · queue workers ==" in shown
    assert "From: queuebot's own detector" in shown
