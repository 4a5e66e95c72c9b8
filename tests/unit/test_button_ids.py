"""The ids of queuebot's buttons (services/button_ids.py): each kind writes the id that
messages already posted carry, byte for byte, reads it back into the same record, and
stands for one command (commands/clicks.py); an id naming nothing is None everywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commands.clicks import command_of, words
from commands.model import Approve, Command, Declare, Dlq, Notify, Reject, Triage
from services import button_ids
from services.button_ids import (
    ChangeDecision,
    DraftSending,
    IncidentDeclaration,
    Pressed,
    QueueRead,
    parse,
)


@pytest.mark.parametrize(
    ("written", "button_id", "record", "command"),
    [
        (button_ids.approve(17), "cr:approve:17", ChangeDecision("approve", 17),
         Approve(request=17)),
        (button_ids.reject(3), "cr:reject:3", ChangeDecision("reject", 3), Reject(request=3)),
        (button_ids.triage("workers"), "q:triage:workers", QueueRead("triage", "workers"),
         Triage(queue="workers")),
        (button_ids.failed("clips"), "q:failed:clips", QueueRead("failed", "clips"),
         Dlq(queue="clips")),
        (button_ids.declare(5), "inc:declare:5", IncidentDeclaration(5), Declare(alert_group=5)),
        (button_ids.draft(4, "customers"), "inc:draft:4:customers",
         DraftSending(4, "customers"), Notify(audience="customers", incident="4")),
    ],
)  # fmt: skip
def test_each_kind_writes_its_id_and_reads_it_back(
    written: str, button_id: str, record: Pressed, command: Command
) -> None:
    assert written == button_id == record.id
    assert parse(button_id) == record
    assert command_of(button_id) == command


@pytest.mark.parametrize(
    "button_id",
    ["cr:approve:0", "cr:reject:000", "cr:approve:x1", "cr:frob:3", "cr:approve:1234567890123",
     "q:triage:", "q:triage:Workers", "q:frob:workers", "q:failed:a b", "inc:declare:0",
     "inc:declare:5:customers", "inc:draft:4", "inc:draft:0:customers", "cr:approve:17 ",
     "xcr:approve:17", "inc:draft:4:Customers", ""],
)  # fmt: skip
def test_an_id_naming_nothing_queuebot_can_do_is_none(button_id: str) -> None:
    assert parse(button_id) is None
    assert command_of(button_id) is None


def test_a_decision_is_named_in_words_and_any_other_click_by_its_id() -> None:
    assert words("cr:approve:17") == "your approval of CR-17"
    assert words("cr:reject:3") == "your rejection of CR-3"
    assert words("q:triage:workers") == "your click on q:triage:workers"


@given(
    number=st.integers(1, 10**12 - 1),
    audience=st.from_regex(r"[a-z][a-z0-9_-]{0,63}", fullmatch=True),
)
def test_every_written_id_reads_back(number: int, audience: str) -> None:
    for written, record in (
        (button_ids.approve(number), ChangeDecision("approve", number)),
        (button_ids.reject(number), ChangeDecision("reject", number)),
        (button_ids.declare(number), IncidentDeclaration(number)),
        (button_ids.draft(number, audience), DraftSending(number, audience)),
        (button_ids.triage(audience[:32]), QueueRead("triage", audience[:32])),
    ):
        assert parse(written) == record
        assert button_ids.DRAWN.match(written)
