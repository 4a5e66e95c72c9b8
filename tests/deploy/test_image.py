"""The image, built by scripts/image.sh and run the way it is deployed: a read-only root
filesystem with a tmpfs /tmp, `db upgrade` then `serve` against PostgreSQL, a TOML
configuration mounted read-only naming a queue table of this test's own, Slack's Web API
pointed at a fake on the host, every secret of serve given as a mounted file. What an
operator would notice: the build works with no network, readiness and the image's own
health check pass, a signed slash command gets its answer, the process is not root, no
secret is in the container's environment (`docker inspect`), no program in the image is
setuid or setgid, and neither the tests nor the test kit are in it.

Without a Docker engine the module is skipped, unless QUEUEBOT_REQUIRE_DEPLOY=1 (CI), where
it fails. The first build on a machine makes the Debian base with debootstrap (as root).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx
import psycopg
import pytest

from testkit import web
from testkit.fake_slack import Call, FakeSlack
from testkit.ports import free_port
from testkit.slack_requests import SECRET, signed, slash_fields
from tests.conftest import _pg_conninfo, postgres_database
from tests.helpers.people import ALICE_TOML, SLACK_ALICE

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("QUEUEBOT_REQUIRE_DEPLOY") == "1"
TAG = "deploy-test"
IMAGE = f"queuebot:{TAG}"
UID = "10001"
# the container is named after this process, so parallel runs on one engine do not meet
NAME = f"queuebot-image-test-{os.getpid()}"

CONFIG = (
    """\
[queues.builds]
profile = "worker_queue"
table = "image_build_jobs"

[channels.operators]
slack = "C0OPS"
"""
    + ALICE_TOML
)

# serve's secrets, each given as a file (the database URL too)
SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-fake-token-image-test",
    "SLACK_SIGNING_SECRET": SECRET,
    "QUEUEBOT_AUDIT_KEY": "image-test-audit-key-0123456789abcdef",
    "QUEUEBOT_ALERT_TOKEN": "image-test-alert-token-5e1d",
}

TABLE = """\
CREATE TABLE image_build_jobs (
  id            BIGSERIAL PRIMARY KEY,
  status        TEXT NOT NULL,
  error_message TEXT,
  queued_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  claimed_at    TIMESTAMPTZ
)"""


def _docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"QUEUEBOT_REQUIRE_DEPLOY=1 but {why}")
    pytest.skip(why)


def _need_docker() -> None:
    if shutil.which("docker") is None:
        _unavailable("no docker command")
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout=20)
    except subprocess.TimeoutExpired:
        _unavailable("the Docker engine did not answer in 20 s")
    if info.returncode != 0:
        _unavailable(f"no Docker engine answers: {info.stderr.strip()}")


@dataclass(frozen=True)
class Built:
    size_mb: int
    build_seconds: float
    report: str


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest) -> Built:
    """The image, built once for the module by scripts/image.sh (wheels from this venv)."""
    _need_docker()
    started = time.monotonic()
    run = subprocess.run(
        ["bash", "scripts/image.sh", TAG],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - started
    if run.returncode == 2:  # the script's "cannot here": no engine, no root for the base
        _unavailable(run.stderr.strip())
    assert run.returncode == 0, f"scripts/image.sh failed:\n{run.stdout}\n{run.stderr}"
    lines = [line for line in run.stdout.splitlines() if line.startswith("image: ")]
    report = "\n".join([*lines, f"image: scripts/image.sh took {seconds:.1f} s"])
    print(report)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n" + report)
    size = int(_docker("image", "inspect", "-f", "{{.Size}}", IMAGE).stdout.strip())
    return Built(size_mb=size // 1_000_000, build_seconds=seconds, report=report)


@dataclass(frozen=True)
class Deployed:
    url: str
    fake: FakeSlack
    upgrade_output: str


def _remove(name: str) -> None:
    _docker("rm", "--force", "--volumes", name)


def _run_args(name: str) -> list[str]:
    """What every container of the test runs with: the host's network (PostgreSQL and the
    fake Slack are on its loopback), a read-only root filesystem and a tmpfs /tmp."""
    return ["run", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp"]


def _secret_files(folder: Path, secrets: dict[str, str]) -> list[str]:
    """Each secret in a file of ``folder`` (mounted read-only at /run/secrets, readable by
    the container's uid), and the arguments naming them to queuebot: NAME_FILE."""
    folder.mkdir()
    folder.chmod(0o755)
    args = ["--volume", f"{folder}:/run/secrets:ro"]
    for name, value in secrets.items():
        path = folder / name.lower()
        path.write_text(value + "\n")
        path.chmod(0o444)
        args += ["--env", f"{name}_FILE=/run/secrets/{path.name}"]
    return args


def _fill_queue(db_url: str) -> None:
    with psycopg.connect(_pg_conninfo(db_url), autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(
            "INSERT INTO image_build_jobs (status, error_message, claimed_at) "
            "SELECT 'queued', NULL, NULL FROM generate_series(1, 4)"
        )
        conn.execute(
            "INSERT INTO image_build_jobs (status, error_message, claimed_at) "
            "SELECT 'failed', %s, now() - interval '5 minutes' FROM generate_series(1, 3)",
            ("disk full on build-7",),
        )


def _wait(what: str, check: Callable[[], bool], timeout: float, logs_of: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            logs = _docker("logs", logs_of)
            raise AssertionError(f"{what} not within {timeout} s; log:\n{logs.stdout}{logs.stderr}")
        time.sleep(0.25)


@pytest.fixture(scope="module")
def deployed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    workdir = tmp_path_factory.mktemp("image")
    config = workdir / "queuebot.toml"
    config.write_text(CONFIG)
    config.chmod(0o644)  # read by the container's user, uid 10001
    upgrade_name, serve_name = f"{NAME}-upgrade", f"{NAME}-serve"
    with contextlib.ExitStack() as stack:
        db_url = stack.enter_context(contextlib.contextmanager(postgres_database)("empty"))
        fake = stack.enter_context(FakeSlack().start())
        stack.callback(_remove, upgrade_name)
        stack.callback(_remove, serve_name)

        upgrade = _docker(
            *_run_args(upgrade_name),
            "--env",
            f"QUEUEBOT_DATABASE_URL={db_url}",
            IMAGE,
            "db",
            "upgrade",
            timeout=120,
        )
        assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
        _fill_queue(db_url)

        port = free_port()
        started = _docker(
            *_run_args(serve_name),
            *_secret_files(workdir / "secrets", {**SECRETS, "QUEUEBOT_DATABASE_URL": db_url}),
            "--detach",
            "--health-interval",
            "1s",
            "--volume",
            f"{config}:/etc/queuebot/queuebot.toml:ro",
            "--env",
            "QUEUEBOT_CONFIG=/etc/queuebot/queuebot.toml",
            "--env",
            f"SLACK_API_BASE_URL={fake.api_url}",
            IMAGE,
            # not the image's 8080 (the host's network is shared): the health check follows
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        )
        assert started.returncode == 0, started.stderr
        url = f"http://127.0.0.1:{port}"

        def live() -> bool:
            try:
                return web.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        _wait("serve answering /healthz", live, 60, serve_name)
        yield Deployed(url=url, fake=fake, upgrade_output=upgrade.stdout + upgrade.stderr)
        logs = _docker("logs", serve_name)
        assert "Traceback" not in logs.stdout + logs.stderr, logs.stdout + logs.stderr


def _inspect(template: str) -> str:
    return _docker("inspect", "-f", template, f"{NAME}-serve").stdout.strip()


def _built_small(built: Built) -> None:
    # scripts/image.sh builds with --network none: every wheel came from wheelhouse/
    assert "queuebot:deploy-test:" in built.report
    assert built.size_mb < 300, built.report
    version = _docker("run", "--rm", IMAGE, "--version")
    assert version.returncode == 0 and version.stdout.startswith("queuebot "), version


def _upgraded(deployed: Deployed) -> None:
    assert "is at revision" in deployed.upgrade_output


def _ready_with_the_mounted_configuration(deployed: Deployed) -> None:
    def ready() -> bool:
        return web.get(f"{deployed.url}/readyz", timeout=5).status_code == 200

    _wait("/readyz 200", ready, 60, f"{NAME}-serve")
    body = web.get(f"{deployed.url}/readyz", timeout=5).json()
    assert body["queues"] == {"builds": "ok"}, body


def _healthy_on_serves_port() -> None:
    # the image's own check runs (docker run set only its interval)
    assert json.loads(_inspect("{{json .Config.Healthcheck.Test}}")) == [
        "CMD",
        "/opt/queuebot/bin/python",
        "-P",
        "-m",
        "bot.healthcheck",
    ]
    _wait(
        "the health check's 'healthy'",
        lambda: _inspect("{{.State.Health.Status}}") == "healthy",
        60,
        f"{NAME}-serve",
    )


def _slash_command_answered(deployed: Deployed) -> None:
    name = f"triage-{time.monotonic_ns()}"
    body = urlencode(
        slash_fields(
            deployed.fake, "triage --queue builds", name=name, user=SLACK_ALICE, trigger="1.t"
        )
    )
    started = time.monotonic()
    ack = web.post(f"{deployed.url}/slack/events", content=body, headers=signed(body), timeout=10)
    assert ack.status_code == 200 and time.monotonic() - started < 3
    answer: Call = deployed.fake.wait_for(lambda c: c.path == f"/response/{name}")[0]
    text = json.dumps(answer.body.get("blocks", [])) + answer.body.get("text", "")
    assert "Triage: queue builds (worker_queue)" in text, text
    assert re.search(r"7 jobs; 3 dead letters", text), text
    assert "disk full on build-" in text, text  # its error signature


def _uid_10001_on_a_read_only_root() -> None:
    assert _inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    pid = _inspect("{{.State.Pid}}")
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert uids == [UID] * 4, status
    assert "queuebot" in Path(f"/proc/{pid}/cmdline").read_text()
    # serve needs no write outside /data and /tmp: elsewhere even root's write is refused
    refused = _docker(
        "exec", "--user", "0", f"{NAME}-serve", "python", "-c", "open('/etc/written', 'w')"
    )
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr


def _no_secret_in_the_containers_environment() -> None:
    env = json.loads(_inspect("{{json .Config.Env}}"))
    names = {item.split("=", 1)[0] for item in env}
    assert {f"{name}_FILE" for name in SECRETS} <= names, names
    assert not names & {*SECRETS, "QUEUEBOT_DATABASE_URL"}, names
    for value in SECRETS.values():
        assert not any(value in item for item in env), value
    # and none in the process's own environment (what /proc/1/environ shows inside)
    environ = Path(f"/proc/{_inspect('{{.State.Pid}}')}/environ").read_bytes()
    for value in SECRETS.values():
        assert value.encode() not in environ, value


def _no_setuid_program_and_no_test_kit() -> None:
    """As root inside the image (so no directory is unreadable): no file with the setuid
    or setgid bit, and neither testkit nor tests anywhere, importable or not."""
    found = _docker(
        "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "find", IMAGE,
        "/", "-xdev", "(", "-perm", "/6000", "-type", "f", ")", "-o",
        "(", "-type", "d", "(", "-name", "testkit", "-o", "-path", "*/site-packages/tests",
        ")", ")",
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == [], found.stdout
    importable = _docker(
        "run", "--rm", "--network", "none", "--entrypoint", "/opt/queuebot/bin/python", IMAGE,
        "-c", "import importlib.util as u; print(u.find_spec('testkit'), u.find_spec('tests'))",
    )  # fmt: skip
    assert importable.stdout.split() == ["None", "None"], importable.stdout + importable.stderr


def test_the_image_runs_read_only_as_deployed(built: Built, deployed: Deployed) -> None:
    """One test, so a parallel run builds and runs the image once, on one worker."""
    _built_small(built)
    _upgraded(deployed)
    _ready_with_the_mounted_configuration(deployed)
    _healthy_on_serves_port()
    _slash_command_answered(deployed)
    _uid_10001_on_a_read_only_root()
    _no_secret_in_the_containers_environment()
    _no_setuid_program_and_no_test_kit()
