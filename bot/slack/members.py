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
            said = exc.response.get("error") if exc.response is not None else None
            hint = " (the app needs the usergroups:read scope)" if said == "missing_scope" else ""
            raise Unavailable(f"Slack answered {said or 'an error'}{hint}") from exc
        users = answer.get("users")
        if not isinstance(users, list):
            raise Unavailable("Slack's answer carried no list of users")
        return frozenset(str(u) for u in users)


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
