"""The shipped reverse-proxy example (deploy/nginx/queuebot.conf) exposes what Slack's
HTTP mode needs and nothing else: /slack/events to anyone (POST), /alerts/alertmanager
only to an allowed network, every other path 404; both paths are serve's own, and the
body limit is queuebot's default. Where nginx is installed, `nginx -t` accepts it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.alertmanager import PATH as ALERTMANAGER
from services.config import HttpConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "nginx" / "queuebot.conf"


def locations(text: str) -> dict[str, str]:
    """Each ``location`` of the file and its body (the blocks nest one level at most)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^\s*location\s+([^{]+?)\s*\{", text, re.MULTILINE):
        depth, at = 1, match.end()
        while depth:
            nxt = re.compile(r"[{}]").search(text, at)
            assert nxt is not None, "unbalanced braces"
            depth += 1 if nxt[0] == "{" else -1
            at = nxt.end()
        found[match[1]] = text[match.end() : at - 1]
    return found


def without_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_only_slack_events_is_open_and_alerts_only_to_an_allowed_network() -> None:
    text = without_comments(EXAMPLE.read_text())
    found = locations(text)
    assert set(found) == {"= /slack/events", f"= {ALERTMANAGER}", "/"}
    slack = found["= /slack/events"]
    assert "proxy_pass http://queuebot;" in slack
    assert "allow" not in slack  # Slack's addresses are not fixed: the signature guards it
    assert re.search(r"limit_except POST \{\s*deny all;\s*\}", slack)
    alerts = found[f"= {ALERTMANAGER}"]
    assert re.search(r"^\s*allow \S+;\s*\n\s*deny all;", alerts, re.MULTILINE)
    assert "proxy_pass http://queuebot;" in alerts
    assert found["/"].split() == ["return", "404;"]
    limit = re.search(r"client_max_body_size (\d+)k;", text)
    assert limit is not None and int(limit[1]) == HttpConfig().max_body_kb


def test_slow_clients_are_let_go_at_the_proxy_as_at_queuebot() -> None:
    text = without_comments(EXAMPLE.read_text())
    http = HttpConfig()
    header = re.search(r"client_header_timeout (\d+)s;", text)
    body = re.search(r"client_body_timeout (\d+)s;", text)
    assert header is not None and int(header[1]) == http.header_timeout_seconds
    assert body is not None and int(body[1]) == http.body_timeout_seconds
    zone = re.search(r"^limit_conn_zone \$binary_remote_addr zone=(\w+):\d+m;", text, re.M)
    assert zone is not None  # outside the server block: nginx takes it in the http context
    per_client = re.search(rf"^\s+limit_conn {zone[1]} (\d+);", text, re.M)
    assert per_client is not None and int(per_client[1]) < http.max_connections


def test_the_readme_points_at_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "deploy/nginx/queuebot.conf" in readme


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")
def test_nginx_accepts_it(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=queuebot.example.com", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    site = EXAMPLE.read_text()
    site = site.replace("/etc/ssl/certs/queuebot.example.com.pem", str(cert))
    site = site.replace("/etc/ssl/private/queuebot.example.com.key", str(key))
    site = site.replace("listen 443 ssl;", "listen 127.0.0.1:8443 ssl;")  # -t binds nothing
    (tmp_path / "site.conf").write_text(site)
    main = tmp_path / "nginx.conf"
    main.write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
        "events {}\n"
        f"http {{\n access_log off;\n client_body_temp_path {tmp_path};\n"
        f" include {tmp_path}/site.conf;\n}}\n"
    )
    checked = subprocess.run(
        ["nginx", "-t", "-q", "-p", str(tmp_path), "-c", str(main)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
