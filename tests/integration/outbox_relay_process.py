"""A relay process for the outbox tests: it delivers ``test.post`` items, and its
delivery never ends (a post stuck in a chat platform), so it holds its item until killed.

Usage: python outbox_relay_process.py URL [LEASE_SECONDS] ; prints ``delivering ID`` when
it holds one. LEASE_SECONDS shortens the outbox's lease (10 s) so that a test waits less
for the item of a killed relay to come due again.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta

from services import outbox
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
    if len(sys.argv) > 2:
        outbox.store.LEASE = timedelta(seconds=float(sys.argv[2]))
    asyncio.run(main(sys.argv[1]))
