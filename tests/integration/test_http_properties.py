"""Whatever reaches the HTTP app, it answers 200, 400, 401, 404 or 413 and logs no
traceback: arbitrary bodies and headers, unsigned and signed with the test secret, thrown
at the app `queuebot serve` runs (build_http_app over the demo estate on SQLite, with
Bolt's Web API and the response_urls pointed at the local fake Slack), in process."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.bootstrap import App, build_app
from bot.demo import DEMO_CONFIG
from bot.http import build_http_app
from bot.slack.app import build_slack_app
from bot.slack.listeners import SlackWiring
from services.config import load_config
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import SECRET, signed

LIMIT = 256 * 1024  # the default [http] max_body_kb
FAKE = "FAKESLACK"  # stands for the fake Slack's address until the body is encoded


@dataclass
class Edge:
    runner: asyncio.Runner
    client: httpx.AsyncClient
    wiring: SlackWiring
    fake: FakeSlack

    def send(self, method: str, path: str, body: bytes, headers: dict[str, bytes]) -> int:
        async def go() -> int:
            response = await self.client.request(method, path, content=body, headers=headers)
            if self.wiring.tasks:  # let the answers of accepted commands finish
                await asyncio.wait(set(self.wiring.tasks), timeout=20)
            return response.status_code

        return self.runner.run(go())


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    workdir: Path = tmp_path_factory.mktemp("http-properties")
    config_path = workdir / "queuebot.toml"
    config_path.write_text(DEMO_CONFIG.format(config=config_path))
    db_url = f"sqlite+aiosqlite:///{workdir}/queuebot.db"
    with FakeSlack().start() as fake, asyncio.Runner() as runner:
        config = load_config(
            config_path,
            environ={
                "QUEUEBOT_DATABASE_URL": db_url,
                "SLACK_BOT_TOKEN": "xoxb-fake-token",
                "SLACK_SIGNING_SECRET": SECRET,
                "SLACK_API_BASE_URL": fake.api_url,
            },
        )

        async def start() -> tuple[App, SlackWiring, httpx.AsyncClient]:
            engine = create_engine(db_url)
            await upgrade(engine)
            async with engine.begin() as conn:
                await build_demo_estate(conn, now=datetime.now(UTC))
            await engine.dispose()
            app = await build_app(config)
            wiring = SlackWiring(
                router=app.router,
                directory=app.directory,
                ledger=app.ledger,
                slack_api_base_url=config.env.slack_api_base_url,
            )
            http = build_http_app(app=app, slack=await build_slack_app(config.env, wiring))
            transport = httpx.ASGITransport(app=http, raise_app_exceptions=False)
            return app, wiring, httpx.AsyncClient(transport=transport, base_url="http://queuebot")

        app, wiring, client = runner.run(start())
        try:
            yield Edge(runner, client, wiring, fake)
        finally:
            runner.run(client.aclose())
            runner.run(wiring.drain())
            runner.run(app.close())


# --- what is thrown at it --------------------------------------------------------------

KEYS = [
    "type", "actions", "action_id", "action_ts", "user", "id", "channel", "container",
    "thread_ts", "response_url", "team", "team_id", "enterprise", "authorizations",
    "is_enterprise_install", "event", "command", "text", "trigger_id", "view", "token",
    "api_app_id", "user_id", "channel_id", "ssl_check", "challenge",
]  # fmt: skip
text = st.text(max_size=24)
scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text
json_values = st.recursive(
    scalar,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=6)
    ),
    max_leaves=24,
)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four: a request right in every part but one or two gets as
    far as the code that reads that part."""
    return st.one_of(good, good, good, bad)


response_urls = mostly(
    st.just(f"{FAKE}/response/prop"),
    st.sampled_from(["not a url", "https://127.0.0.1:9/gone", "", "http://x.invalid/"]) | text,
)
users = mostly(st.sampled_from(["U0ALICE", "U0BOB", "U0NOBODY"]), text)
command_texts = mostly(
    st.sampled_from(
        ["help", "triage --queue workers", "dlq --limit 2", "pending", "approve CR-1", "stuck"]
    ),
    text,
)
slash = st.fixed_dictionaries(
    {
        "command": mostly(st.just("/queue"), st.just("/nothing") | text),
        "text": command_texts,
        "user_id": users,
        "response_url": response_urls,
        "trigger_id": mostly(st.from_regex(r"\A[0-9][0-9.a-f]{4,40}\Z"), text),
    },
    optional={"channel_id": mostly(st.just("C0OPS"), text), "team_id": text},
)
action_ids = mostly(st.sampled_from(["cr:approve:1", "cr:reject:1", "cr:approve:0", "cr:x"]), text)
click = st.fixed_dictionaries(
    {
        "type": mostly(st.just("block_actions"), text),
        "user": mostly(st.fixed_dictionaries({"id": users}), json_values),
        "response_url": response_urls,
        "actions": mostly(
            st.lists(
                mostly(
                    st.fixed_dictionaries(
                        {"action_id": action_ids, "action_ts": mostly(st.just("1.2"), text)}
                    ),
                    json_values,
                ),
                min_size=1,
                max_size=2,
            ),
            json_values,
        ),
    },
    optional={"channel": json_values, "container": json_values, "team": json_values},
)
# requests Slack could send, so that commands and clicks run all the way to their answers
good_slash = st.fixed_dictionaries(
    {
        "command": st.just("/queue"),
        "text": command_texts,
        "user_id": st.sampled_from(["U0ALICE", "U0BOB", "U0NOBODY"]),
        "channel_id": st.just("C0OPS"),
        "response_url": st.just(f"{FAKE}/response/prop"),
        "trigger_id": st.from_regex(r"\A[0-9][0-9.a-f]{4,40}\Z"),
    }
)
good_click = st.fixed_dictionaries(
    {
        "type": st.just("block_actions"),
        "user": st.fixed_dictionaries({"id": st.sampled_from(["U0ALICE", "U0BOB"])}),
        "response_url": st.just(f"{FAKE}/response/prop"),
        "actions": st.lists(
            st.fixed_dictionaries(
                {
                    "action_id": st.from_regex(r"\Acr:(approve|reject):[0-9]{1,3}\Z"),
                    "action_ts": st.from_regex(r"\A[0-9]{1,10}\.[0-9]{6}\Z"),
                }
            ),
            min_size=1,
            max_size=1,
        ),
    }
)
bodies = st.one_of(
    st.tuples(st.just("slash"), good_slash),
    st.tuples(st.just("click"), good_click),
    st.tuples(st.just("raw"), st.binary(max_size=512)),
    st.tuples(st.just("form"), st.dictionaries(st.sampled_from(KEYS) | text, text, max_size=8)),
    st.tuples(st.just("json"), json_values),
    st.tuples(st.just("payload"), json_values),
    st.tuples(st.just("slash"), slash),
    st.tuples(st.just("click"), click),
    st.tuples(st.just("big"), st.integers(LIMIT - 64, LIMIT + 64)),
)
stamps = mostly(st.just("now"), st.sampled_from(["stale", "junk", "absent"]))
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=40)
extra_headers = st.dictionaries(
    st.sampled_from(
        ["Content-Type", "X-Slack-Retry-Num", "X-Slack-Retry-Reason", "X-Forwarded-For", "Accept"]
    )
    | st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,15}\Z"),
    header_values,
    max_size=4,
).filter(lambda h: not {k.lower() for k in h} & {"content-length", "transfer-encoding", "host"})
targets = st.sampled_from(
    [("POST", "/slack/events")] * 6 + [("GET", "/healthz"), ("GET", "/readyz"), ("POST", "/x")]
)


def with_fake(value: Any, url: str) -> Any:
    if isinstance(value, str):
        return value.replace(FAKE, url)
    if isinstance(value, list):
        return [with_fake(v, url) for v in value]
    if isinstance(value, dict):
        return {k: with_fake(v, url) for k, v in value.items()}
    return value


def encode(kind: str, data: Any, url: str) -> tuple[bytes, str | None]:
    """The body's bytes and its content type."""
    data = with_fake(data, url)
    form = "application/x-www-form-urlencoded"
    if kind == "raw":
        return data, None
    if kind == "big":
        return b"a" * data, form
    if kind == "json":
        return json.dumps(data).encode(), "application/json"
    if kind in ("payload", "click"):
        return urlencode({"payload": json.dumps(data)}).encode(), form
    return urlencode(data).encode(), form


def slack_headers(body: bytes, *, sign: bool, stamp: str) -> dict[str, str]:
    now = int(time.time())
    ts = {"now": now, "stale": now - 400, "junk": now, "absent": now}[stamp]
    found = signed(body, ts=ts) if sign else signed(body, secret="not-the-secret", ts=ts)
    if stamp == "junk":
        found["X-Slack-Request-Timestamp"] = "12ab"
    if stamp == "absent":
        del found["X-Slack-Request-Timestamp"]
    del found["Content-Type"]
    return found


@settings(
    max_examples=250,
    deadline=5000,  # ms; answers of accepted commands run inside the example
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    target=targets,
    shape=bodies,
    sign=mostly(st.just(True), st.just(False)),
    stamp=stamps,
    content_type=mostly(st.none(), st.sampled_from(["application/json", "text/plain", "x/y"])),
    extra=extra_headers,
)
def test_any_request_gets_a_plain_status_and_no_traceback(
    edge: Edge,
    caplog: pytest.LogCaptureFixture,
    target: tuple[str, str],
    shape: tuple[str, Any],
    sign: bool,
    stamp: str,
    content_type: str | None,
    extra: dict[str, str],
) -> None:
    caplog.set_level(logging.WARNING)
    method, path = target
    body, natural_type = encode(*shape, edge.fake.url)
    headers = {
        **slack_headers(body, sign=sign, stamp=stamp),
        **({"Content-Type": content_type or natural_type} if content_type or natural_type else {}),
        **extra,
    }
    start = len(caplog.records)
    status = edge.send(method, path, body, {k: v.encode("latin-1") for k, v in headers.items()})

    assert status in {200, 400, 401, 404, 413}
    signature_kept = all(
        headers.get(k) == v for k, v in slack_headers(body, sign=sign, stamp=stamp).items()
    )
    if path == "/slack/events" and len(body) <= LIMIT and signature_kept:
        if not sign or stamp != "now":
            assert status == 401
        else:
            assert status != 401
    if len(body) > LIMIT:
        assert status == 413
    logged = caplog.records[start:]
    assert not [r for r in logged if r.exc_info], [r.getMessage() for r in logged]
    assert not [r for r in logged if "Traceback" in r.getMessage()]
