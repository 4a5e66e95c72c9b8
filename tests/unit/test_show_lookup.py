"""Where /queue show looks without --queue (commands/show_lookup.py): the cases the demo's
two queues cannot show (tests/e2e/test_console_hints.py shows the others)."""

from __future__ import annotations

from typing import Any

import pytest

from commands.show_lookup import find_job
from services.errors import NotFound, UsageError
from services.estate.model import CanonicalState, JobDetail


class Reads:
    """Queues by name, each holding some job ids; "int" queues refuse ids that are not."""

    def __init__(self, held: dict[str, set[str]], ints: frozenset[str] = frozenset()) -> None:
        self.held = held
        self.ints = ints

    @property
    def queue_names(self) -> list[str]:
        return list(self.held)

    async def show_job(self, *, queue: str | None, job_id: str) -> JobDetail:
        name = queue or self.queue_names[0]
        if name in self.ints and not job_id.isdigit():
            raise UsageError(f"{job_id!r} is not a job id in queue {name!r}")
        if job_id not in self.held[name]:
            raise NotFound(f"no job {job_id} in queue {name!r}")
        return JobDetail(name, job_id, "failed", CanonicalState.FAILED, {}, [], [])


async def test_a_job_in_several_other_queues_is_not_guessed() -> None:
    reads: Any = Reads({"a": set(), "b": {"7"}, "c": {"7"}})
    with pytest.raises(NotFound) as refused:
        await find_job(reads, queue=None, job_id="7")
    assert refused.value.message == (
        "no job 7 in queue 'a' (the default queue); queues b, c each hold one: use "
        "/queue show 7 --queue NAME"
    )


async def test_an_id_no_queue_could_hold_stays_a_usage_error_naming_them_all() -> None:
    reads: Any = Reads({"a": set(), "b": set(), "c": set()}, ints=frozenset({"a"}))
    with pytest.raises(UsageError) as refused:
        await find_job(reads, queue=None, job_id="x1")
    assert refused.value.message == ("'x1' is not a job id in queue 'a'; not in queues b, c either")


async def test_one_queue_or_a_named_one_is_the_only_place_looked() -> None:
    single: Any = Reads({"a": set()})
    with pytest.raises(NotFound, match=r"^no job 7 in queue 'a'$"):
        await find_job(single, queue=None, job_id="7")
    named: Any = Reads({"a": set(), "b": {"7"}})
    with pytest.raises(NotFound, match=r"^no job 7 in queue 'a'$"):
        await find_job(named, queue="a", job_id="7")
    found, note = await find_job(named, queue=None, job_id="7")
    assert (found.queue, note) == (
        "b",
        "No job 7 in queue a (the default queue); found in queue b.",
    )
