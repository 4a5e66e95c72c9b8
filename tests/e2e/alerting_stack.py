"""The real Prometheus and Alertmanager for end-to-end tests.

Each program runs from Debian's packages (``/usr/bin/prometheus``,
``/usr/bin/prometheus-alertmanager``) on a free 127.0.0.1 port, in a temporary directory
that holds its generated configuration, its storage and its log (stdout and stderr).
Use them as context managers: the program is started and awaited (``GET /-/ready``) on
entry and stopped (SIGTERM, then SIGKILL) on exit, whatever the test did; when the
``with`` block ends in an exception, the tail of the program's log is printed so that
pytest shows it with the failure. Programs still running when the interpreter exits are
stopped by an ``atexit`` hook, and each one is started with ``PR_SET_PDEATHSIG`` so that
even a SIGKILLed pytest leaves none behind.

When a program is missing, ``need_alerting()`` skips the test, unless
``QUEUEBOT_REQUIRE_ALERTING=1`` (``.ci/run`` sets it), where that is a failure.

What Alertmanager 0.25 accepts (checked with ``amtool check-config`` and by running it):
``group_wait`` may be 0, ``group_interval`` and ``repeat_interval`` may be as small as
1s but not 0. ``repeat_interval`` below ``group_interval`` is accepted silently (0.25
neither refuses nor warns), yet a repeat is only considered when the group is flushed,
every ``group_interval``; this harness refuses that combination so a test cannot ask for
repeats it will not get. A notification attempt, retries included, is given
``max(group_interval, 10s)``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest

from testkit import web
from testkit.ports import free_port
from tests.helpers.processes import stop

T = TypeVar("T")

ALERTMANAGER_BIN = "/usr/bin/prometheus-alertmanager"
PROMETHEUS_BIN = "/usr/bin/prometheus"
AMTOOL_BIN = "/usr/bin/amtool"
PROMTOOL_BIN = "/usr/bin/promtool"
REQUIRE_ALERTING = os.environ.get("QUEUEBOT_REQUIRE_ALERTING") == "1"

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 7 * 86400,
    "y": 365 * 86400,
}


def duration_seconds(text: str) -> float:
    """A Prometheus/Alertmanager duration ("1s", "500ms", "1m30s") in seconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def missing_programs() -> list[str]:
    """Which of the four programs the stack needs are not installed."""
    wanted = (ALERTMANAGER_BIN, PROMETHEUS_BIN, AMTOOL_BIN, PROMTOOL_BIN)
    return [p for p in wanted if not os.access(p, os.X_OK)]


def need_alerting() -> None:
    """Skip the calling test when Prometheus or Alertmanager is missing; under
    ``QUEUEBOT_REQUIRE_ALERTING=1`` (CI) fail it instead."""
    missing = missing_programs()
    if not missing:
        return
    reason = (
        f"{', '.join(missing)} not installed (Debian packages prometheus and "
        "prometheus-alertmanager)"
    )
    if REQUIRE_ALERTING:
        pytest.fail(f"QUEUEBOT_REQUIRE_ALERTING=1 but {reason}")
    pytest.skip(reason)


def utc_now() -> str:
    """Now, as Alertmanager's API takes a time: RFC 3339 in UTC."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def wait_for(
    predicate: Callable[[], T | None], timeout: float, *, what: str = "", every: float = 0.1
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that; raise
    AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what or predicate!r}")
        time.sleep(every)


def listening_addresses(pid: int) -> set[str]:
    """The TCP addresses ("127.0.0.1:9093", "[::]:9094") process ``pid`` listens on, read
    from /proc: proof of what a program binds besides its web port."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, v6 in (("tcp", False), ("tcp6", True)):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            host_hex, port_hex = fields[1].split(":")
            raw = bytes.fromhex(host_hex)
            # /proc prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            host = str(ipaddress.ip_address(raw))
            found.add(f"[{host}]:{int(port_hex, 16)}" if v6 else f"{host}:{int(port_hex, 16)}")
    return found


# --- the processes ------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGTERM it when the thread that started it
    # (the test's main thread) dies, even by SIGKILL.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


_running: set[Program] = set()
_running_lock = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _running_lock:
        left = list(_running)
    for program in left:
        program.stop()


class Program:
    """One real program on a free 127.0.0.1 port in its own temporary directory.

    Subclasses write their configuration in ``write_config`` and name their command line
    in ``command``; the rest (start, readiness, log, stop) is shared.
    """

    name = "program"
    ready_path = "/-/ready"
    start_timeout = 30.0

    def __init__(self, workdir: Path | None = None) -> None:
        self._own_dir = workdir is None
        self.dir = (
            Path(tempfile.mkdtemp(prefix=f"queuebot-{self.name}-")) if workdir is None else workdir
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / f"{self.name}.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    # what a subclass says
    def write_config(self) -> None:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    # shared
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The process id of the last start (still given after stop, to check it is gone)."""
        assert self._pid is not None, f"{self.name} was never started"
        return self._pid

    def log(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def start(self) -> Self:
        self.write_config()
        for _attempt in range(3):
            self.port = free_port()
            with self.log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    self.command(),
                    cwd=self.dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent,  # only prctl runs there: no lock is taken
                )
            self._pid = self._proc.pid
            with _running_lock:
                _running.add(self)
            if self._wait_ready():
                return self
            # Another process may have taken the port between free_port() and the bind.
            if "address already in use" not in self.log():
                break
            self.stop()
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                if web.get(self.url + self.ready_path, timeout=1).status_code == 200:
                    return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop(proc)
        with _running_lock:
            _running.discard(self)

    def close(self) -> None:
        """Stop, and remove the temporary directory when this object made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            print(f"\n--- last lines of {self.name}'s log ({self.log_path}) ---", file=sys.stderr)
            print(self.log_tail(), file=sys.stderr)
            # Keep the directory for a look after the failure.
            self.stop()
            return
        self.close()

    def wait_for(self, predicate: Callable[[], T | None], timeout: float, what: str = "") -> T:
        """``wait_for`` that names this program and shows the tail of its log on timeout."""
        try:
            return wait_for(predicate, timeout, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- {self.name}'s log ---\n{self.log_tail()}") from None

    def _get(self, path: str, **params: str) -> Any:
        resp = web.get(self.url + path, params=params, timeout=10)
        resp.raise_for_status()
        return resp.json()


def _write_json_as_yaml(path: Path, doc: Mapping[str, Any]) -> None:
    # JSON is YAML: both programs read it, and no YAML library is needed.
    path.write_text(json.dumps(doc, indent=2) + "\n")


class Alertmanager(Program):
    """Alertmanager 0.25 with one route to one webhook receiver.

    Clustering is off (``--cluster.listen-address=``; without it Alertmanager binds
    0.0.0.0:9094 and gossips).
    """

    name = "alertmanager"

    def __init__(
        self,
        webhook_url: str,
        token: str | None = None,
        group_by: Sequence[str] = ("alertname", "queue"),
        group_wait: str = "1s",
        group_interval: str = "2s",
        repeat_interval: str = "4s",
        send_resolved: bool = True,
        workdir: Path | None = None,
        log_level: str = "info",
        max_alerts: int | None = None,
    ) -> None:
        if duration_seconds(group_interval) <= 0 or duration_seconds(repeat_interval) <= 0:
            raise ValueError("group_interval and repeat_interval cannot be zero")
        if duration_seconds(repeat_interval) < duration_seconds(group_interval):
            raise ValueError(
                f"repeat_interval {repeat_interval} < group_interval {group_interval}: "
                "repeats are only sent when the group is flushed, every group_interval"
            )
        duration_seconds(group_wait)
        super().__init__(workdir)
        self.webhook_url = webhook_url
        self.token = token
        self.group_by = tuple(group_by)
        self.group_wait = group_wait
        self.group_interval = group_interval
        self.repeat_interval = repeat_interval
        self.send_resolved = send_resolved
        self.max_alerts = max_alerts  # the webhook's max_alerts (None: every alert)
        self.log_level = log_level
        self.config_path = self.dir / "alertmanager.yml"

    def config(self) -> dict[str, Any]:
        webhook: dict[str, Any] = {"url": self.webhook_url, "send_resolved": self.send_resolved}
        if self.max_alerts is not None:
            webhook["max_alerts"] = self.max_alerts
        if self.token is not None:
            webhook["http_config"] = {
                "authorization": {"type": "Bearer", "credentials": self.token}
            }
        return {
            "route": {
                "receiver": "queuebot",
                "group_by": list(self.group_by),
                "group_wait": self.group_wait,
                "group_interval": self.group_interval,
                "repeat_interval": self.repeat_interval,
            },
            "receivers": [{"name": "queuebot", "webhook_configs": [webhook]}],
        }

    def write_config(self) -> None:
        _write_json_as_yaml(self.config_path, self.config())

    def command(self) -> list[str]:
        return [
            ALERTMANAGER_BIN,
            f"--config.file={self.config_path}",
            f"--storage.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            f"--log.level={self.log_level}",
        ]

    def post_alerts(self, alerts: Iterable[Mapping[str, Any]]) -> None:
        """``POST /api/v2/alerts``: each alert is {labels, annotations?, startsAt?,
        endsAt?, generatorURL?}. Without endsAt, Alertmanager resolves it by itself after
        ``resolve_timeout`` (5 minutes) unless posted again."""
        resp = web.post(self.url + "/api/v2/alerts", json=list(alerts), timeout=10)
        if resp.status_code != 200:
            raise AssertionError(f"alertmanager answered {resp.status_code}: {resp.text}")

    def resolve(self, labels: Mapping[str, str]) -> None:
        """End the alert with exactly these labels now, as Prometheus does: the alert is
        posted again with endsAt = now and the annotations and generatorURL it has. (A
        post replaces those fields: one with labels alone would make the resolved
        notification carry no annotations and an empty generatorURL.) startsAt is left
        out: Alertmanager keeps the earlier one, and this API shows it cut to
        milliseconds, which would move it."""
        alert: dict[str, Any] = {"labels": dict(labels), "endsAt": utc_now()}
        for held in self.alerts():
            if held["labels"] == dict(labels):
                alert.update(
                    annotations=held["annotations"],
                    generatorURL=held.get("generatorURL", ""),
                )
        self.post_alerts([alert])

    def groups(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts/groups``: the aggregation groups Alertmanager holds. A
        group whose alerts were all resolved and notified is gone: nothing more is sent
        for it."""
        groups: list[dict[str, Any]] = self._get("/api/v2/alerts/groups")
        return groups

    def flushes(self) -> int:
        """How many times a group was flushed (with ``log_level="debug"``, which logs each
        flush): a group's flushes run one after another, so a later flush shows the
        earlier one has sent all it was going to send."""
        return self.log().count("msg=flushing")

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts Alertmanager holds (active, silenced,
        inhibited; resolved ones drop out)."""
        found: list[dict[str, Any]] = self._get("/api/v2/alerts")
        return found


class Prometheus(Program):
    """Prometheus 2.42 scraping ``/metrics`` of the given ``host:port`` targets, evaluating
    the given rule files and sending its alerts to one Alertmanager.

    ``resend_delay`` (``--rules.alert.resend-delay``, 1m by default) is how often a firing
    alert is sent again; Prometheus sends each alert with an endsAt a few resend delays
    ahead, so a short one keeps Alertmanager up to date within seconds.
    ``--rules.alert.for-grace-period`` is left at its default: it only matters when
    Prometheus restarts with an alert in its ``for`` wait (the state is restored for rules
    whose ``for`` is at least that long), which these short-lived instances never do.
    """

    name = "prometheus"

    def __init__(
        self,
        scrape_url_targets: Sequence[str],
        rule_files: Sequence[Path],
        alertmanager_url: str | None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        resend_delay: str = "2s",
        workdir: Path | None = None,
        log_level: str = "info",
    ) -> None:
        duration_seconds(scrape_interval)
        duration_seconds(evaluation_interval)
        duration_seconds(resend_delay)
        super().__init__(workdir)
        self.targets = [_host_port(t) for t in scrape_url_targets]
        self.rule_files = [Path(f).resolve() for f in rule_files]
        self.alertmanager_url = alertmanager_url
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.resend_delay = resend_delay
        self.log_level = log_level
        self.config_path = self.dir / "prometheus.yml"

    def config(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "rule_files": [str(f) for f in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": "queuebot",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        if self.alertmanager_url is not None:
            am = urlsplit(self.alertmanager_url)
            target: dict[str, Any] = {
                "scheme": am.scheme or "http",
                "api_version": "v2",
                "static_configs": [{"targets": [am.netloc]}],
            }
            if am.path not in ("", "/"):
                target["path_prefix"] = am.path
            doc["alerting"] = {"alertmanagers": [target]}
        return doc

    def write_config(self) -> None:
        _write_json_as_yaml(self.config_path, self.config())

    def command(self) -> list[str]:
        return [
            PROMETHEUS_BIN,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--rules.alert.resend-delay={self.resend_delay}",
            f"--log.level={self.log_level}",
        ]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """``GET /api/v1/query``: the instant vector (or other result) of ``expr`` now."""
        body = self._get("/api/v1/query", query=expr)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v1/alerts``: the pending and firing alerts of the rules."""
        body = self._get("/api/v1/alerts")
        found: list[dict[str, Any]] = body["data"]["alerts"]
        return found

    def targets_up(self) -> bool:
        """Whether every scrape target has been scraped successfully."""
        active = self._get("/api/v1/targets")["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def _host_port(target: str) -> str:
    """``host:port`` from ``host:port`` or a URL such as ``http://127.0.0.1:8000/metrics``."""
    if "://" in target:
        return urlsplit(target).netloc
    return target
