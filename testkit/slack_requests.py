"""The request signer shared by the tests and the benchmarks: requests built the way Slack
builds them, the signature over ``v0:{ts}:{body}`` and the fields of a slash command."""

from __future__ import annotations

import hashlib
import hmac
import time

from testkit.fake_slack import FakeSlack

# the signing secret of the fake workspace: not a secret, the tests and benchmarks share it
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # noqa: S105


def signed(body: str | bytes, *, secret: str = SECRET, ts: int | None = None) -> dict[str, str]:
    """Slack's v0 signature headers: HMAC-SHA256 of ``v0:{timestamp}:{body}``, over the
    body's exact bytes (a ``str`` is taken as UTF-8)."""
    stamp = str(int(time.time()) if ts is None else ts)
    raw = body.encode() if isinstance(body, str) else body
    digest = hmac.new(secret.encode(), b"v0:%s:%s" % (stamp.encode(), raw), hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def slash_fields(
    fake: FakeSlack, text: str, *, name: str, user: str, trigger: str
) -> dict[str, str]:
    """What Slack sends for `/queue <text>`; its answer goes to the fake's response_url
    ``name``."""
    return {
        "token": "legacy",
        "team_id": "T0FAKE",
        "team_domain": "fake",
        "channel_id": "C0OPS",
        "channel_name": "ops",
        "user_id": user,
        "user_name": user.lower(),
        "command": "/queue",
        "text": text,
        "api_app_id": "A0QUEUEBOT",
        "is_enterprise_install": "false",
        "response_url": fake.response_url(name),
        "trigger_id": trigger,
    }
