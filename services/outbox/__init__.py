"""The transactional outbox: chat posts a change makes are written in the change's own
transaction and delivered after it, retried until they go out.

``add`` writes an item inside the caller's transaction, so a post exists exactly when the
change it reports committed. The relay delivers items outside any transaction and marks
each done, or due again after a backoff with the error kept. What it promises:

- **In order per subject.** Items of one subject go out in the order they were written:
  an item waits while an older one of its subject is undone.
- **Per channel.** Each item names its *lane*, the channel it posts to (an alert group's
  channel, an audience's; by default its subject's own lane). A lane has at most
  ``lane_width`` items in hand at once (one by default), so a channel waiting out its
  pace or a 429's Retry-After holds only its own next item, while the relay keeps up to
  ``IN_FLIGHT`` deliveries going in other lanes.
- **By priority.** Among due items the relay takes the highest priority first (an
  incident's checklist, reminders and escalations are ``URGENT``; alert updates and news
  ``BULK``; the rest ``NORMAL``), and within a priority the oldest due first.
- **Collapse.** An undelivered ``BULK`` item with a collapse key is superseded by any
  newer item of its subject with the same key: it is marked done (``superseded_by``) and
  never posted. Items of other priorities are never superseded, and the newest of a key
  always goes out. Alert groups use it under a backlog: a root update is superseded by a
  newer one, news of a change by newer news or by the resolution; their roots,
  resolutions and re-firings always go out.
- **Where it can be shown.** An item may name its *destination*, the one place its post
  can go (a Slack or Discord channel a command was typed in; a console session). A relay
  claims only the items its process reaches (``Reach``: serve's, the channels of its chat
  platforms; a console's, its own session), and those without a destination. An item
  nobody running reaches is never tried, so never failed nor closed: it waits for a
  process that reaches it (a console session that has ended never comes back, and its
  posts stay undelivered, which is what they are).
- **Short leases, renewed.** A claimed item is leased to its relay for ``LEASE`` (its due
  time pushed ahead, ``leased_by`` naming the relay), and the relay renews the lease every
  quarter of it while the post runs, however long (a 429 waited out). A relay that
  dies stops renewing, and its items come due again within ``LEASE``: another relay
  delivers them, so a post goes out at least once. An update of a message is idempotent; a
  thread post delivered just before a crash can show twice (never zero times). A live
  relay's slow post is never taken over while its renewals reach the database.
- **Records once, where asked.** A poster that records what its post did (a
  communication met) can mark its item done in that record's transaction (``finish``):
  the record is then made once, however often the item is delivered.

Claims are serialized (a PostgreSQL advisory lock; SQLite has one writer), so relays in
several processes never hold more of a lane than its width. After a commit, ``kick``
delivers the subject's items at once (its own subject's order, not its lane's width), so
a reply to a person comes after the posts it reports; the relay loop (``run_forever``)
picks up everything else.

The package: ``model.py`` (the item, priorities and lanes a poster sees),
``store.py`` (the SQL: adding, claiming under a lease, renewing, closing),
``relay.py`` (``Outbox``: the loop that claims, delivers and records each outcome) and
``jobs.py`` (forgetting done items, hourly).
"""

from services.outbox.model import (
    BULK,
    EVERYWHERE,
    NO_PLATFORM,
    NORMAL,
    NOT_POSTED,
    URGENT,
    Item,
    PostedNowhere,
    Poster,
    Reach,
    Unshown,
    channel_lane,
    destination,
)
from services.outbox.relay import LANE_WIDTH, Outbox
from services.outbox.store import (
    KEEP_DONE,
    LEASE,
    add,
    add_many,
    chat_posts,
    cover,
    done_before,
    finish,
    forget_done,
    newest,
    unshown,
)

__all__ = [
    "BULK",
    "EVERYWHERE",
    "KEEP_DONE",
    "LANE_WIDTH",
    "LEASE",
    "NORMAL",
    "NOT_POSTED",
    "NO_PLATFORM",
    "URGENT",
    "Item",
    "Outbox",
    "PostedNowhere",
    "Poster",
    "Reach",
    "Unshown",
    "add",
    "add_many",
    "channel_lane",
    "chat_posts",
    "cover",
    "destination",
    "done_before",
    "finish",
    "forget_done",
    "newest",
    "unshown",
]
