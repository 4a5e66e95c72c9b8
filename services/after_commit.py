"""The chat posts a person's change makes after it commits, and that person's answer.

An approval, a halt or a close commits, then its posts go out: the outbox's kicks, to the
audit channel, the plan's thread, the operators' channel. Each channel keeps its pace, and
a channel that answers 429 holds its post for the Retry-After Slack or Discord asks. The
person who clicked or typed is answered on their own command's response (Slack's
response_url, Discord's interaction token), which no channel's pace holds; so the answer
waits for the posts ``ANSWER_WAITS`` seconds at most (a post to a quiet channel takes a
small part of that). Posts that went out or failed by then are reported as
before (a failure in the answer); posts still going then go on behind the answer, which
says they have not gone out yet, and still keep their channel's pace. The outbox holds
every one of them until it goes out, so nothing is lost to the answer going first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from services.db.on_commit import FollowUp, PostFailure, run_follow_ups

ANSWER_WAITS = 1.0  # seconds an answer waits for the chat posts its change made, at most


@dataclass(frozen=True)
class Posts:
    """How the posts after a commit stood when the person was answered: those that
    failed, and whether some were still going out (they go on behind the answer)."""

    failures: tuple[PostFailure, ...] = ()
    pending: bool = False


class AfterCommit:
    """Runs the follow-ups of a person's change, for the answer at most ``answer_within``
    seconds; what is still running then finishes behind it (``close`` ends it)."""

    def __init__(self, *, answer_within: float = ANSWER_WAITS) -> None:
        self.answer_within = answer_within
        self._behind: set[asyncio.Task[tuple[PostFailure, ...]]] = set()

    async def run(self, follow_ups: Sequence[FollowUp], *, what: str) -> Posts:
        if not follow_ups:
            return Posts()
        posting = asyncio.create_task(run_follow_ups(follow_ups, what=what))
        self._behind.add(posting)  # a strong reference: the loop keeps only weak ones
        posting.add_done_callback(self._behind.discard)
        done, _ = await asyncio.wait({posting}, timeout=self.answer_within)
        if posting in done:
            return Posts(posting.result())
        return Posts(pending=True)

    @property
    def going(self) -> int:
        """Follow-ups still running behind an answer already given."""
        return len(self._behind)

    async def close(self) -> None:
        """On shutdown: stop what still runs behind an answer. Its posts stay in the
        outbox, and the next relay (another replica's, or this one's after a restart)
        delivers them once the lease this one took runs out."""
        behind = list(self._behind)
        for task in behind:
            task.cancel()
        await asyncio.gather(*behind, return_exceptions=True)
