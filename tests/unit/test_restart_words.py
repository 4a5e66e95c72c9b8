"""What a person asked, in their words, for the answer a process gives after taking over a
delivery another process acknowledged and died on: one wording on every platform."""

from __future__ import annotations

import pytest

from bot.delivery import Asked


@pytest.mark.parametrize(
    ("action_id", "words"),
    [
        ("cr:approve:17", "your approval of CR-17"),
        ("cr:reject:3", "your rejection of CR-3"),
        ("q:triage:workers", "your click on q:triage:workers"),
        ("inc:draft:4:customers", "your click on inc:draft:4:customers"),
    ],
)
def test_a_click_is_named_by_what_it_decided(action_id: str, words: str) -> None:
    assert Asked(action_id=action_id).words() == words


def test_a_slash_command_is_named_by_its_options() -> None:
    asked = Asked(group="queue", name="triage", values={"queue": "workers", "since": None})
    assert asked.words() == "/queue triage queue:workers"
