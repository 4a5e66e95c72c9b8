"""The bot's identity for Bolt (bot/slack/app.py): auth.test asked once at start and kept,
a failure at start asked again on first use, and the app built without Bolt's warning
about a token it would ignore."""

from __future__ import annotations

import logging
import os
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from bot.slack.app import BotIdentity, build_slack_app
from services.config import EnvSettings

AUTH_TEST = {"ok": True, "team_id": "T0FAKE", "user_id": "U0BOT", "bot_id": "B0BOT"}


class Answer(dict[str, Any]):
    headers = {"x-oauth-scopes": "commands,chat:write"}


class Client:
    """Stands in for AsyncWebClient: auth.test fails ``failures`` times, then answers."""

    token = "xoxb-fake-token"

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.calls = 0

    async def auth_test(self) -> Answer:
        self.calls += 1
        if self.calls <= self.failures:
            raise aiohttp.ClientConnectionError("connection refused")
        return Answer(AUTH_TEST)


async def ask(identity: BotIdentity) -> Any:
    return await identity(context=None, enterprise_id=None, team_id="T0FAKE", user_id="U0ALICE")  # type: ignore[arg-type]


async def test_asked_once_at_start_and_kept() -> None:
    client = Client()
    identity = BotIdentity(client)  # type: ignore[arg-type]
    await identity.check()
    first, second = await ask(identity), await ask(identity)
    assert client.calls == 1
    assert first is not None and first is second
    assert first.bot_token == "xoxb-fake-token"
    assert (first.team_id, first.bot_id, first.bot_user_id) == ("T0FAKE", "B0BOT", "U0BOT")
    assert first.bot_scopes == ["commands", "chat:write"]


async def test_a_failure_at_start_is_logged_and_asked_again_on_first_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = Client(failures=1)
    identity = BotIdentity(client)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="queuebot.slack"):
        await identity.check()
    assert "auth.test at start failed" in caplog.text
    result = await ask(identity)
    assert client.calls == 2 and result is not None and result.bot_user_id == "U0BOT"


async def test_a_request_is_refused_while_auth_test_still_fails() -> None:
    client = Client(failures=2)
    identity = BotIdentity(client)  # type: ignore[arg-type]
    await identity.check()
    assert await ask(identity) is None
    assert await ask(identity) is not None
    assert client.calls == 3


async def test_built_without_a_warning_and_the_variable_left_in_place(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-environment")
    env = EnvSettings.model_validate(
        {
            "SLACK_BOT_TOKEN": SecretStr("xoxb-fake-token"),
            "SLACK_SIGNING_SECRET": SecretStr("secret"),
            "SLACK_API_BASE_URL": "http://127.0.0.1:9/api/",  # nothing listens: start fails
        }
    )
    with caplog.at_level(logging.WARNING):
        app = await build_slack_app(env, wiring=None)  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records if "auth.test" not in r.getMessage()] == []
    assert app.client.token is None  # authorize hands each request the token
    assert app.client.base_url == "http://127.0.0.1:9/api/"
    assert os.environ["SLACK_BOT_TOKEN"] == "xoxb-from-the-environment"
