"""What config check warns of when the approvers configured could not approve a change."""

from __future__ import annotations

from services.changes.quorum import config_warning
from services.config import ApprovalConfig


def test_one_approver_cannot_approve_their_own_changes() -> None:
    said = config_warning(ApprovalConfig(), ["alice"])
    assert said == (
        "only one person is an approver (alice): a change alice requests could never be "
        "approved (the requester never counts); add approvers under [people]"
    )


def test_enough_approvers_say_nothing() -> None:
    assert config_warning(ApprovalConfig(large_change_approvals=2), ["a", "b", "c"]) is None
    assert config_warning(ApprovalConfig(), []) is None  # a problem of its own


def test_a_quorum_larger_than_the_approvers_is_never_reached() -> None:
    said = config_warning(ApprovalConfig(large_change_approvals=3), ["a", "b"])
    assert said is not None
    assert "needs 3 approvals besides its requester, and only 2 people are approvers" in said
    assert said.endswith(
        "such a change could never be approved; add approvers under [people] or lower "
        "[approval] large_change_approvals"
    )
