"""The option names queuebot no longer spells, and where a text still uses one.

The filters are ``--error-like``, ``--job-type`` and ``--failure-reason``. ``--error``
(without ``-like``) and ``--type`` are gone, and ``--reason R`` as ``/queue dlq``'s
filter is ``--failure-reason R`` (``--reason`` is the why of a change). ``dlq`` still
reads ``--reason`` and ``--type`` as aliases, and its reply says the new spelling ("--type
is now spelled --job-type"): that note is not a use. Triage's own flag is still spelled
``--type`` (it has no ``--job-type``), so a text that names triage may say it.
"""

from __future__ import annotations

import re

_ERROR = re.compile(r"(?<![\w-])--error(?![\w-])")
_TYPE = re.compile(r"(?<![\w-])--type(?![\w-])")
# dlq's filter: "--reason R", "/queue dlq ... --reason", "--reason and --failure-reason"
_REASON = re.compile(
    r"(?<![\w-])--reason (?:R\b|[a-z_]+ and --failure-reason|and --failure-reason|"
    r"or --failure-reason)|/queue dlq[^\n.;]*?(?<![\w-])--reason(?![\w-])"
)
_RENAMED = re.compile(r"--[\w-]+ is now spelled --[\w-]+")


def retired(text: str, *, about_triage: bool = False) -> list[str]:
    """Each retired option name ``text`` uses, with the line it is on (``about_triage``:
    the whole text is triage's, whose ``--type`` is current)."""
    found = []
    for line in _RENAMED.sub("", text).splitlines():
        for pattern, name in ((_ERROR, "--error"), (_REASON, "--reason"), (_TYPE, "--type")):
            if not pattern.search(line):
                continue
            if name == "--type" and (about_triage or "triage" in line):
                continue  # triage's own flag
            found.append(f"{name}: {line.strip()}")
    return found
