"""Answer workers: separate processes that answer what the HTTP process acknowledged.

Slack must hear an acknowledgement within 3 s, and it comes from the process that serves
HTTP. Answers (database reads, rendering, posting) are CPU work; in the same process they
share the interpreter lock and the event loop with every acknowledgement, so a burst of
commands delays the acks behind them. Here the HTTP process only verifies, acknowledges and
hands each delivery over a queue; the workers, each with its own engines, answer it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import queue as stdlib_queue
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any

from bot.slack.listeners import Delivery, SlackWiring, handle_delivery

log = logging.getLogger("queuebot.slack.workers")
STOP = None


class AnswerWorkers:
    def __init__(self, *, config_path: Path | None, count: int = 1) -> None:
        self._context = multiprocessing.get_context("spawn")
        self.queue: Any = self._context.Queue()
        self._config_path = str(config_path) if config_path else None
        self._processes: list[SpawnProcess] = [
            self._context.Process(
                target=_worker_main,
                args=(self._config_path, self.queue),
                name=f"queuebot-answers-{n}",
                daemon=True,
            )
            for n in range(count)
        ]

    def start(self) -> AnswerWorkers:
        for process in self._processes:
            process.start()
        return self

    def put_nowait(self, item: Delivery) -> None:
        self.queue.put_nowait(item)

    def stop(self, grace: float = 15.0) -> None:
        """Let the workers answer what they were given, then end them."""
        for _ in self._processes:
            self.queue.put(STOP)
        for process in self._processes:
            process.join(timeout=grace)
            if process.is_alive():
                log.warning(
                    "answer worker %s did not stop in %ss; terminating", process.name, grace
                )
                process.terminate()
                process.join(timeout=5)


def _worker_main(config_path: str | None, inbox: Any) -> None:
    logging.basicConfig(
        level=os.environ.get("QUEUEBOT_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s[worker]: %(message)s",
    )
    asyncio.run(_answer_forever(config_path, inbox))


async def _answer_forever(config_path: str | None, inbox: Any) -> None:
    from bot.bootstrap import build_app
    from bot.serve import _notifier
    from services.config import load_config

    config = load_config(config_path)
    app = await build_app(config, notifier=_notifier(config), migrate=False)
    wiring = SlackWiring(router=app.router, directory=app.directory, ledger=app.ledger)
    loop = asyncio.get_running_loop()
    parent = multiprocessing.parent_process()
    try:
        while True:
            try:
                delivery = await loop.run_in_executor(None, inbox.get, True, 1.0)
            except stdlib_queue.Empty:
                if parent is not None and not parent.is_alive():
                    log.warning("the serving process is gone; this answer worker stops")
                    break
                continue
            if delivery is STOP:
                break
            wiring.spawn(handle_delivery(wiring, delivery))
    finally:
        await wiring.drain()
        await app.close()
