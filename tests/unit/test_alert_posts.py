"""An alert post is a typed record; the outbox keeps it as JSON with the keys every
earlier version wrote, and reads back what any of them wrote."""

from __future__ import annotations

import pytest

from services.alerts.model import (
    PostReply,
    PostRoot,
    PostTriage,
    PostUpdate,
    post_from_payload,
)
from services.message import Message, Text, message_json

NOTE = Message(summary="3 more alert(s) not shown", blocks=(Text("3 more"),))


@pytest.mark.parametrize(
    "post",
    [
        PostRoot(7, 2),
        PostUpdate(7, 2),
        PostReply(7, 2, NOTE),
        PostReply(7, 2, NOTE, turn=True),
        PostTriage(7, 2),
    ],
)
def test_a_post_comes_back_from_its_payload(post: object) -> None:
    assert isinstance(post, PostRoot | PostUpdate | PostReply | PostTriage)
    assert post_from_payload(post.to_payload()) == post


def test_the_payload_keeps_the_earlier_keys() -> None:
    assert PostRoot(7, 2).to_payload() == {"action": "root", "episode": 2, "group": 7}
    assert PostUpdate(7, 2).to_payload() == {"action": "update", "group": 7, "episode": 2}
    assert PostTriage(7, 2).to_payload() == {"action": "triage", "episode": 2, "group": 7}
    assert PostReply(7, 2, NOTE, turn=True).to_payload() == {
        "action": "reply",
        "group": 7,
        "episode": 2,
        "message": message_json(NOTE),
        "turn": True,
    }


def test_payloads_of_earlier_versions_are_read() -> None:
    note = message_json(NOTE)
    # a new episode's note of alerts not shown had no "turn"
    old = {"action": "reply", "episode": 1, "message": note, "group": 3}
    assert post_from_payload(old) == PostReply(3, 1, NOTE, turn=False)
    # no "episode": the group's own when delivered
    assert post_from_payload({"action": "update", "group": 3}) == PostUpdate(3, None)


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown alert post 'wave'"):
        post_from_payload({"action": "wave", "group": 3, "episode": 1})
