"""What config check warns of when the approvers configured could not approve a change
for some of the people who may request it (the requester never counts)."""

from __future__ import annotations

from bot.config_check import config_warning
from services.config import ApprovalConfig


def test_one_approver_cannot_approve_their_own_changes() -> None:
    said = config_warning(ApprovalConfig(), ["alice"], ["alice"])
    assert said == (
        "only one person is an approver (alice): a change alice requests could never be "
        "approved (the requester never counts); add approvers under [people]"
    )


def test_enough_approvers_say_nothing() -> None:
    approval = ApprovalConfig(large_change_approvals=2)
    assert config_warning(approval, ["a", "b", "c"], ["a", "b", "c"]) is None
    assert config_warning(ApprovalConfig(), [], ["a"]) is None  # a problem of its own
    # an approver who requests nothing, and operators who approve nothing: both reach 2
    assert config_warning(approval, ["a", "b"], ["c", "d"]) is None


def test_a_two_person_team_is_told_its_large_changes_need_a_lower_setting() -> None:
    """Requester and one approver: a large change needs 2 besides its requester."""
    said = config_warning(ApprovalConfig(), ["alice", "bob"], ["alice", "bob"])
    assert said == (
        "a change of more than 100 rows (a requeue, cancel, redrive by ids or rollback) "
        "needs 2 approvals besides its requester ([approval] large_change_approvals), and "
        "only 2 people are approvers (alice, bob): such a change could never be approved "
        'whoever requests it; add approvers under [people] (roles = ["approver"]) or lower '
        "[approval] large_change_approvals to 1. A staged redrive, judged by its sample, "
        "needs one approval."
    )


def test_only_the_requesters_who_are_approvers_are_short() -> None:
    """Two approvers reach a quorum of 2 for dora, who is no approver, not for themselves."""
    said = config_warning(
        ApprovalConfig(large_change_rows=3), ["alice", "bob"], ["alice", "bob", "dora"]
    )
    assert said is not None
    assert "could never be approved when alice or bob requests it" in said
    assert "lower [approval] large_change_approvals to 1" in said
    assert said.endswith(
        "A staged redrive, judged by its sample, needs one approval with --sample 3 or less."
    )


def test_a_quorum_larger_than_the_approvers_is_never_reached() -> None:
    said = config_warning(ApprovalConfig(large_change_approvals=3), ["a", "b"], ["c"])
    assert said is not None
    assert "needs 3 approvals besides its requester" in said
    assert "and only 2 people are approvers (a, b)" in said
    assert "such a change could never be approved whoever requests it" in said
    assert "or lower [approval] large_change_approvals to 2." in said
