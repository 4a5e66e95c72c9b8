"""What a requeue, a cancel and a redrive at once say of their quorum (of a request they
say what any request over rows says: ``services.changes.words``)."""

from __future__ import annotations

from services.changes.words import KindWords
from services.config import ApprovalConfig
from services.plans.messages import one_approval, staged


class RowWords(KindWords):
    def ways_out(self, approval: ApprovalConfig) -> list[str]:
        return [f"select at most {approval.large_change_rows} rows"]


class RedriveWords(RowWords):
    def ways_out(self, approval: ApprovalConfig) -> list[str]:
        return [
            *super().ways_out(approval),
            "redrive them as a staged plan (select them with a filter or --all instead of "
            f"naming ids): {staged(approval)}",
        ]

    def fewer(self, approval: ApprovalConfig) -> str:
        return (
            " A staged redrive instead (a filter or --all rather than ids) is judged by its "
            f"sample, and {one_approval(approval)}."
        )
