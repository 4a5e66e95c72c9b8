"""Slack's limits on views, checked as Slack checks them: a view (a modal or a Home tab) is
read into slack_sdk's view and block models and turned back into JSON, which runs every
model's validators on every block and element (at most 100 blocks, a title of 24
characters, a section's text of 3,000, a button's of 75, a select's 100 options...).

The fake Slack refuses a view that fails this (``invalid_arguments``, as Slack does), and a
test may call ``check_view`` on any view queuebot builds."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.views import View


class ViewRefused(ValueError):
    """A view Slack would refuse; the message is slack_sdk's, naming the limit."""


def check_view(view: Any) -> dict[str, Any]:
    """The view as Slack would keep it, or ViewRefused naming the first limit it breaks."""
    if not isinstance(view, dict) or view.get("type") not in {"modal", "home"}:
        raise ViewRefused("a view is an object whose type is modal or home")
    try:
        return View(**view).to_dict()
    except (SlackObjectFormationError, TypeError, KeyError, AttributeError) as exc:
        raise ViewRefused(str(exc)) from exc
