"""serve is closed by default, and its secrets can stay out of every environment:

- without an alert token `queuebot serve` does not start (one line naming the variable,
  its _FILE form and the opt-out); with ``[alerts] allow_unauthenticated = true`` it starts,
  and its log, ``/readyz`` and ``config check`` say the alert path is open;
- every secret may come from the file ``NAME_FILE`` names: a serve given only files
  answers a signed Slack command and takes Alertmanager's token, and no process of it
  holds a secret in its environment (``/proc/PID/environ``, what ``docker inspect`` shows
  of a container)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from sqlalchemy.engine import make_url

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import SECRET, signed, slash_fields
from tests.e2e.serving import demo_database, running_serve
from tests.e2e.test_cli import one_line
from tests.e2e.test_console import queuebot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alertmanager"
REFUSED = (
    "serve takes alerts on /alerts/alertmanager only with a bearer token; set "
    "QUEUEBOT_ALERT_TOKEN (16 characters or more: `openssl rand -hex 16`) or "
    "QUEUEBOT_ALERT_TOKEN_FILE (the path of a file holding it), or, to take alerts from "
    "anyone who reaches the port, set [alerts] allow_unauthenticated = true in the "
    "configuration file"
)
OPENED = "\n[alerts]\nallow_unauthenticated = true\n"


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (None, "QUEUEBOT_ALERT_TOKEN is not set"),
        (" ", "QUEUEBOT_ALERT_TOKEN is empty (counts as not set)"),
    ],
    ids=["unset", "blank"],
)
def test_serve_does_not_start_without_an_alert_token(
    tmp_path: Path, demo_db: str, token: str | None, said: str
) -> None:
    env = {"QUEUEBOT_DATABASE_URL": demo_db}
    if token is not None:
        env["QUEUEBOT_ALERT_TOKEN"] = token
    result = queuebot("serve", "--port", "0", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr) == f"queuebot: {said}: {REFUSED}"
    # config check says so too, as a warning: the other commands need no token
    check = queuebot("config", "check", cwd=tmp_path, env=env)
    assert "ALERT_TOKEN" not in check.stderr  # no problem (this file has others: exit 1)
    assert (
        f"warning: {said}: `queuebot serve` will not start; set QUEUEBOT_ALERT_TOKEN (or "
        "QUEUEBOT_ALERT_TOKEN_FILE), or [alerts] allow_unauthenticated = true to take alerts "
        "without a token (other commands need no token)"
    ) in check.stdout.splitlines()


def test_opened_on_purpose_serve_starts_and_says_the_alert_path_is_unauthenticated(
    tmp_path: Path, demo_db: str
) -> None:
    opened = "unauthenticated ([alerts] allow_unauthenticated = true): anyone who reaches "
    with running_serve(tmp_path, demo_db, {"QUEUEBOT_ALERT_TOKEN": ""}, extra=OPENED) as served:
        served.wait_for_log(
            "[alerts] allow_unauthenticated = true and QUEUEBOT_ALERT_TOKEN is not set: anyone "
            "who reaches this port may post alerts to /alerts/alertmanager"
        )
        ready = web.get(f"{served.url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text  # still ready: the operator's choice
        assert ready.json()["alert_path"] == (
            f"{opened}this port may post alerts to /alerts/alertmanager"
        )
        payload = json.loads((FIXTURES / "firing.json").read_text())
        taken = web.post(f"{served.url}/alerts/alertmanager", json=payload, timeout=10)
        assert taken.status_code == 200, taken.text
    check = queuebot(
        "config",
        "check",
        cwd=tmp_path,
        env={"QUEUEBOT_CONFIG": str(tmp_path / "queuebot.toml"), "QUEUEBOT_DATABASE_URL": demo_db},
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        "warning: [alerts] allow_unauthenticated = true: /alerts/alertmanager is "
        "unauthenticated, anyone who reaches serve's port may post alerts; set "
        "QUEUEBOT_ALERT_TOKEN (or QUEUEBOT_ALERT_TOKEN_FILE) and give Alertmanager the same "
        "token to close it"
    ) in check.stdout.splitlines()


def _secret_files(folder: Path, secrets: dict[str, str]) -> dict[str, str]:
    """Each secret in a file of its own (with the newline `echo` writes), readable by its
    owner only, as Docker and Kubernetes mount them; the NAME_FILE variables naming them."""
    folder.mkdir()
    named = {}
    for name, value in secrets.items():
        path = folder / name.lower()
        path.write_text(f"{value}\n")
        path.chmod(0o400)
        named[f"{name}_FILE"] = str(path)
    return named


def _environments(pid: int) -> dict[int, bytes]:
    """``/proc/PID/environ`` of the process and of every process it started (on
    PostgreSQL serve starts its background worker)."""
    found = {pid: Path(f"/proc/{pid}/environ").read_bytes()}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found.update(_environments(int(child)))
    return found


@pytest.mark.postgres
def test_a_serve_given_only_secret_files_answers_and_keeps_every_secret_out_of_its_environment(
    tmp_path: Path,
) -> None:
    with demo_database("postgres", tmp_path) as db_url, FakeSlack().start() as fake:
        # trust authentication takes any password: this one only has to be kept out of sight
        password = "db-password-from-a-file-7d1e"
        url = make_url(db_url).set(password=password).render_as_string(hide_password=False)
        secrets = {
            "QUEUEBOT_DATABASE_URL": url,
            "QUEUEBOT_ALERT_TOKEN": "alert-token-from-a-file-0c4b9e",
            "QUEUEBOT_AUDIT_KEY": "audit-key-from-a-file-0123456789abcdef",
            "SLACK_BOT_TOKEN": "xoxb-bot-token-from-a-file",
            "SLACK_SIGNING_SECRET": SECRET,
        }
        env = {"SLACK_API_BASE_URL": fake.api_url, **_secret_files(tmp_path / "run", secrets)}
        # A new interpreter: /proc/PID/environ is what its exec was given.
        with running_serve(tmp_path, db_url, env, fresh=True) as served:
            processes = _environments(served.pid)
            # serve, its background worker (and multiprocessing's resource tracker)
            assert len(processes) >= 2, processes
            for pid, environ in processes.items():
                names = {item.split(b"=", 1)[0].decode() for item in environ.split(b"\0") if item}
                assert {f"{name}_FILE" for name in secrets} <= names, pid
                assert not names & set(secrets), (pid, names & set(secrets))
                for value in [*secrets.values(), password]:
                    assert value.encode() not in environ, (pid, value)

            # a signed slash command is answered: the bot token and signing secret were read
            name = f"files-{time.monotonic_ns()}"
            body = urlencode(slash_fields(fake, "help", name=name, user="U0ALICE", trigger="1.f"))
            ack = web.post(
                f"{served.url}/slack/events", content=body, headers=signed(body), timeout=10
            )
            assert ack.status_code == 200, ack.text
            answer = fake.wait_for(lambda c: c.path == f"/response/{name}")[0]
            assert "/queue" in json.dumps(answer.body), answer.body

            # Alertmanager's token is the file's, without its newline
            payload = json.loads((FIXTURES / "firing.json").read_text())
            alerts = f"{served.url}/alerts/alertmanager"
            bearer = {"Authorization": f"Bearer {secrets['QUEUEBOT_ALERT_TOKEN']}"}
            assert web.post(alerts, json=payload, timeout=10).status_code == 401
            assert web.post(alerts, json=payload, headers=bearer, timeout=10).status_code == 200
            log = served.log.read_text()
            for value in [*secrets.values(), password]:
                assert value not in log


@pytest.mark.parametrize(
    ("case", "said"),
    [
        (
            "both",
            "environment: both QUEUEBOT_AUDIT_KEY and QUEUEBOT_AUDIT_KEY_FILE are set; set only "
            "one: QUEUEBOT_AUDIT_KEY_FILE names a file holding the value, which then stays out "
            "of the environment",
        ),
        (
            "missing",
            "environment: QUEUEBOT_AUDIT_KEY_FILE = '{path}': cannot read the file: No "
            "such file or directory",
        ),
        (
            "empty",
            "environment: QUEUEBOT_AUDIT_KEY_FILE = '{path}': the file is empty; write the "
            "secret into it",
        ),
        (
            "short",
            "environment: QUEUEBOT_AUDIT_KEY (read from QUEUEBOT_AUDIT_KEY_FILE): must be at "
            "least 32 characters; make one with `openssl rand -hex 32`",
        ),
    ],
)
def test_a_secret_file_that_cannot_be_used_is_one_line_naming_the_variable_never_the_value(
    tmp_path: Path, demo_db: str, case: str, said: str
) -> None:
    path = tmp_path / "audit-key"
    value = "audit-key-value-never-shown-0123456789"
    env = {"QUEUEBOT_DATABASE_URL": demo_db, "QUEUEBOT_AUDIT_KEY_FILE": str(path)}
    if case == "both":
        path.write_text(value)
        env["QUEUEBOT_AUDIT_KEY"] = value
    elif case == "empty":
        path.write_text("\n")
    elif case == "short":
        value = "short-key-never-shown"
        path.write_text(value + "\n")
    result = queuebot("config", "check", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert one_line(result.stderr) == "queuebot: " + said.format(path=path)
    assert value not in result.stdout + result.stderr
    assert os.environ.get("QUEUEBOT_AUDIT_KEY") != value


def test_the_demo_uses_its_own_database_whatever_file_the_environment_names(
    tmp_path: Path,
) -> None:
    """`queuebot demo` in a container whose environment names the database by a file: the
    demo's own database wins, not "both set"."""
    url_file = tmp_path / "database-url"
    url_file.write_text("postgresql://u:p@db.internal/q\n")
    env = {"QUEUEBOT_DATABASE_URL_FILE": str(url_file)}
    ran = queuebot("demo", stdin="/queue help\n", cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stderr
    assert "/queue triage" in ran.stdout
