"""What a kind of change request says: of a request (its headline and outcome, as
``Said``) and of its quorum (what the kind is called there, and its ways to need fewer
approvals). Each domain gives its kinds their words (a ``KindWords`` of its own, in its
``messages.py``); these defaults are the words of a request that changes the rows it
froze."""

from __future__ import annotations

from services import format as fmt
from services.changes.model import ChangeView, Executed, Said
from services.config import ApprovalConfig


class KindWords:
    selection = True  # the request's selection is shown
    checks_title = "Preconditions"
    overrides = True  # a check its requester overrode is pointed out

    # -- a request -------------------------------------------------------------------

    def headline(self, v: ChangeView) -> str:
        return f"{v.kind} {fmt.count(v.eligible)} row(s) in queue {v.queue}"

    def outcome(self, v: ChangeView, result: Executed) -> str:
        """The line that says what an executed request did."""
        line = (
            f"{fmt.count(len(result.changed))} row(s) changed, "
            f"{fmt.count(len(result.skipped))} skipped"
        )
        if result.job_events:
            line += f", {fmt.count(result.job_events)} job event(s) written"
        return line

    def said(self, v: ChangeView) -> Said:
        return Said(
            headline=self.headline(v),
            outcome=None if v.result is None else self.outcome(v, v.result),
            selection=self.selection,
            checks_title=self.checks_title,
            overrides=self.overrides,
        )

    # -- its quorum (services/changes/quorum.py) --------------------------------------

    changes = "it changes"  # what is more than the large change's rows

    def quorum_what(self, kind: str, rows: int, judged: int, approval: ApprovalConfig) -> str:
        """The request as a refusal for want of approvers names it."""
        return f"{kind} of {rows} row{'' if rows == 1 else 's'}"

    def ways_out(self, approval: ApprovalConfig) -> list[str]:
        """Ways for a large request to need fewer approvals, besides a lower setting."""
        return []

    def one_approval(self, approval: ApprovalConfig, rows: int, judged: int) -> str | None:
        """Why a request of many rows needs one approval all the same, where it does."""
        return None

    def fewer(self, approval: ApprovalConfig) -> str:
        """What a request that needs more than one approval could do to need one."""
        return ""


GENERIC = KindWords()


def said(v: ChangeView) -> Said:
    """What the request's kind said of it; for a view made without its kind (a test's,
    say), the words of a request over rows."""
    return v.said if v.said is not None else GENERIC.said(v)
