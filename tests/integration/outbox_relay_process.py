"""A relay process for the outbox tests: it delivers ``test.post`` items, and its
delivery never ends (a post stuck in a chat platform), so it holds its item until killed.

Usage: python outbox_relay_process.py URL ; prints ``delivering ID`` when it holds one.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

from services.db import create_engine
from services.outbox import Item, Outbox


async def main(url: str) -> None:
    engine = create_engine(url)
    relay = Outbox(engine=engine, clock=lambda: datetime.now(UTC))

    async def stuck(item: Item) -> None:
        print(f"delivering {item.id}", flush=True)
        await asyncio.Event().wait()

    relay.register("test.post", stuck)
    await relay.run_forever(asyncio.Event(), interval=0.1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
