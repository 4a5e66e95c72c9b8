"""Slack user groups as a source of roles, rotas and teams: their members read with
``usergroups.users.list`` (scope ``usergroups:read``), and read again at once when Slack
says a group changed (the ``subteam_members_changed`` and ``subteam_updated`` events)."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from services.access import Membership, Source
from services.errors import Unavailable

log = logging.getLogger("queuebot.slack")


class SlackGroups:
    """Reads a Slack user group's members (user ids) over the Web API."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def members(self, source: Source) -> frozenset[str]:
        try:
            answer = await self.client.usergroups_users_list(usergroup=source.id)
        except SlackApiError as exc:  # Slack's own word for it: missing_scope, no_such_subteam
            said = _said(exc)
            hint = " (the app needs the usergroups:read scope)" if said == "missing_scope" else ""
            raise Unavailable(f"Slack answered {said}{hint}") from exc
        users = answer.get("users")
        if not isinstance(users, list):
            raise Unavailable("Slack's answer carried no list of users")
        return frozenset(str(u) for u in users)


def _said(exc: SlackApiError) -> str:
    """Slack's error code (``missing_scope``), or the HTTP status of an answer that is not
    Slack's JSON (a 500's page of text, whose ``response`` is not a dict to ask)."""
    response = exc.response
    data = getattr(response, "data", None)
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    return f"HTTP {status}" if isinstance(status, int) else "an error"


def group_of(event: dict[str, Any]) -> str | None:
    """The user group an event is about: ``subteam_id`` (members changed) or
    ``subteam.id`` (the group updated)."""
    found = event.get("subteam_id")
    if found is None and isinstance(event.get("subteam"), dict):
        found = event["subteam"].get("id")
    return str(found) if isinstance(found, str) and found else None


def register_group_events(app: AsyncApp, membership: Membership) -> None:
    """A user group's change makes the next question read it again (within seconds of a
    handoff, not at the end of the cache's minute)."""

    async def changed(event: dict[str, Any]) -> None:
        group = group_of(event)
        if group is not None:
            membership.forget(Source("slack_usergroup", group))
            log.info("Slack user group %s changed: its members are read again", group)

    app.event("subteam_members_changed")(changed)
    app.event("subteam_updated")(changed)
