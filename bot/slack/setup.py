"""Which ways Slack reaches ``queuebot serve``, from the SLACK_* variables and ``[slack]
posting_only``: serve's start and ``config check`` judge a setup by this one rule.

A bot token alone posts, but Slack can then send nothing back: no command, no click on
the buttons queuebot's posts carry. That is refused unless ``[slack] posting_only = true``
says it is meant (docs/decisions.md, "Posting only")."""

from __future__ import annotations

from dataclasses import dataclass

from services.config import EnvSettings
from services.errors import ConfigError

POSTING_ONLY = (
    "posting only ([slack] posting_only = true): queuebot posts to Slack and takes no "
    "command or click from it, so its posts there carry no buttons"
)


@dataclass(frozen=True)
class SlackSetup:
    """The ways Slack reaches this process, from the SLACK_* variables."""

    http: bool  # POST /slack/events: the bot token and the signing secret
    socket: bool  # Socket Mode: the bot token and an app-level token (no signing secret)
    env: EnvSettings
    posting_only: bool = False  # the bot token alone, chosen in [slack]

    def _unset(self, variable: str) -> str:
        return f"{variable} {'is empty' if variable in self.env.empty else 'not set'}"

    def describe(self, *, socket_failure: str | None = None) -> str:
        """For the start line: what is on, and for what is off, why."""
        if self.posting_only:
            return f"Slack {POSTING_ONLY}"
        if not (self.http or self.socket):
            return "Slack off (no SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET or SLACK_APP_TOKEN set)"
        secret, app = self._unset("SLACK_SIGNING_SECRET"), self._unset("SLACK_APP_TOKEN")
        http = (
            "Slack HTTP on at /slack/events"
            if self.http
            else f"Slack HTTP off ({secret}; Socket Mode needs none)"
        )
        sock = "Socket Mode on" if self.socket else f"Socket Mode off ({app})"
        if self.socket and socket_failure is not None:
            sock = f"Socket Mode not connected yet ({socket_failure}; retried with backoff)"
        return f"{http}, {sock}"


def slack_setup(env: EnvSettings, *, posting_only: bool = False) -> SlackSetup:
    """Which ways in Slack has. Half a setup is refused, naming what is missing: Slack's
    HTTP requests need the bot token and the signing secret, Socket Mode needs the bot
    token and an app-level token; the bot token alone only where ``posting_only``."""
    bot, secret, app = env.slack_bot_token, env.slack_signing_secret, env.slack_app_token

    def unset(variable: str) -> str:
        return f"{variable} is {'empty' if variable in env.empty else 'not set'}"

    if bot is None:
        if app is not None:
            raise ConfigError(
                f"SLACK_APP_TOKEN is set but {unset('SLACK_BOT_TOKEN')}: Socket Mode needs "
                "the bot token (xoxb-) too, from the app's OAuth & Permissions page"
            )
        if secret is not None:
            raise ConfigError(
                f"SLACK_SIGNING_SECRET is set but {unset('SLACK_BOT_TOKEN')}: Slack needs "
                "the bot token (xoxb-) too, from the app's OAuth & Permissions page"
            )
        return SlackSetup(http=False, socket=False, env=env)
    if posting_only:
        for variable, value in (("SLACK_SIGNING_SECRET", secret), ("SLACK_APP_TOKEN", app)):
            if value is not None:
                raise ConfigError(
                    f"[slack] posting_only = true, but {variable} is set: queuebot would "
                    "take Slack's requests after all; unset it, or remove posting_only"
                )
        return SlackSetup(http=False, socket=False, env=env, posting_only=True)
    if secret is None and app is None:
        raise ConfigError(
            f"SLACK_BOT_TOKEN is set but {unset('SLACK_SIGNING_SECRET')} and "
            f"{unset('SLACK_APP_TOKEN')}: set SLACK_SIGNING_SECRET for Slack's HTTP "
            "requests, or SLACK_APP_TOKEN for Socket Mode, or, to only post (the buttons "
            "in queuebot's posts then cannot be clicked), set [slack] posting_only = true"
        )
    return SlackSetup(http=secret is not None, socket=app is not None, env=env)
