"""What Discord offers as the failure-reason choices: what each configured queue's
profile says, not one profile's list for every queue."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy.ext.asyncio import create_async_engine

from services.config import QueueConfig, default_queues
from services.estate.estate import Estate
from services.estate.message_job import MessageJobProfile
from services.estate.registry import ProfileRegistry, shipped_profiles
from services.estate.worker_queue import WorkerQueueProfile
from services.estate.worker_queue.schema import FAILURE_REASONS


def estate(queues: dict[str, QueueConfig], registry: ProfileRegistry | None = None) -> Estate:
    engine = create_async_engine("sqlite+aiosqlite://")  # never connected
    return Estate(engine=engine, queues=queues, registry=registry)


def test_the_demo_offers_worker_queues_reasons_once() -> None:
    assert estate(default_queues()).failure_reasons() == FAILURE_REASONS
    twice = {"a": QueueConfig(profile="worker_queue"), "b": QueueConfig(profile="worker_queue")}
    assert estate(twice).failure_reasons() == FAILURE_REASONS


def test_queues_that_keep_no_failure_reason_offer_none() -> None:
    queues = {"clips": QueueConfig(profile="message_job"), "river": QueueConfig(preset="river")}
    assert estate(queues).failure_reasons() == ()


class FreeTextReasons(MessageJobProfile):
    name = "free_text_reasons"
    failure_reasons: ClassVar[tuple[str, ...] | None] = None


def test_a_queue_whose_reasons_are_any_text_turns_the_pick_list_off() -> None:
    registry = shipped_profiles()
    registry.add(FreeTextReasons)
    queues = {
        "jobs": QueueConfig(profile="worker_queue"),
        "other": QueueConfig.model_construct(profile="free_text_reasons"),
    }
    assert estate(queues, registry).failure_reasons() == ()


def test_the_union_keeps_each_profiles_order() -> None:
    class Fewer(WorkerQueueProfile):
        name = "fewer"
        failure_reasons = ("oom", "timeout")

    registry = shipped_profiles()
    registry.add(Fewer)
    queues = {
        "jobs": QueueConfig(profile="worker_queue"),
        "fewer": QueueConfig.model_construct(profile="fewer"),
    }
    assert estate(queues, registry).failure_reasons() == (*FAILURE_REASONS, "oom")
