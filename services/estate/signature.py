"""Failure signatures: an error text with its variable parts (ids, numbers) taken out.

Two failures with the same signature almost always share a cause, so triage and redrive
group by it: one outage whose every error carries its own request id must read as one
signature, and two causes must stay two. The rules run here, in Python, on every
database: triage reads a sample of the newest error texts and counts their signatures
itself.

What is taken out, in this order (each marker says what stood there):

- **URLs** keep their scheme and host. An API's (http, https, ws, wss) keeps its path's
  shape, what is an id in it becoming ``<id>`` (a segment that is a number, has two digits
  or more, is a hex id or a token; a file name keeps its extension; ``v1``, ``s3``,
  ``h264`` are names): ``https://api.pay.example/v1/charges/ch_3NfK2a9xQ/refund`` ->
  ``https://api.pay.example/v1/charges/<id>/refund``. Any other's path is an object's key
  or a file's name, data rather than shape, and becomes ``/<path>``:
  ``s3://clips-prod/acme/9f1c.mp4`` -> ``s3://clips-prod/<path>``. A host label that is
  an id becomes ``<id>``; query values ``<v>`` (their keys stay); a fragment ``#<v>``.
  The whole URL once became ``<url>``; but the host says which API or bucket failed,
  often the very cause a reader looks for (the payments API answering 503, not the mail
  relay), and the path which call; only the ids in them would split one outage into a
  signature per job. A name in an API's path or host (a tenant's slug) is kept, so an
  outage over tenants whose URLs name them reads as a signature per tenant. Numbers in
  the host (an IP address, a port) are left to the number rule.
- **Quoted values** (in ``'...'`` or ``"..."``, no space inside) become ``'<v>'`` /
  ``"<v>"``, the quote kept so the reader sees a value stood there: ``'INV-104857'``,
  ``"user@example.com"``, ``'a970eb87'``. A quoted name of letters and underscores alone
  (``"accounts_pkey"``, ``'user_id'``, ``"abc"``, ``'Invoice'``, ``'Foo::Bar'``) is kept:
  it names a constraint, a column, a key or a class, and that is the cause (``unique
  constraint "accounts_pkey"`` and ``"users_email_key"`` are two faults).
- **UUIDs** become ``<uuid>``, ``0x`` numbers ``<hex>``.
- **Words with ids**: a run of letters, digits, ``_`` and ``-`` with a letter and a digit
  in it, 6 characters or more (``s3``, ``mp4``, ``p24`` are too short to be ids):
  - a **token** (a ULID ``01HZX3K8Q9V7M2N4P5R6S8T0W1``, base64 ``dGhpcyBpcyBhIHRva2Vu``,
    a Stripe-like ``pi_3NfK2a9xQabcDEF12345``), 16 characters or more of which a part
    between ``_`` and ``-`` of 8 or more is random (``_random``), becomes ``<id>``;
    identifiers made of words stay (``ERR_HTTP2_STREAM_ERROR``, ``utf8mb4_unicode_ci``,
    ``ISO8601DateTimeFormat``, ``sha256WithRSAEncryption``);
  - each part between ``_`` and ``-`` that is a **hex id** (request, trace and span ids,
    digests), 6 hex digits or more with a digit and a letter among them, becomes
    ``<n>``, a prefix kept: ``a970eb87``, ``73e1c0aa`` -> ``<n>``, ``req_8f14e45f``
    -> ``req_<n>``. The marker is the number's, not one of its own: a random hex id is
    all digits now and then (one 8-character id in fifty, one 16-character id in two
    thousand: in an outage of 450 jobs, one time in five), and the number rule makes that
    one ``<n>`` too, so the outage stays one signature. Letters alone are words
    (``facade``, ``decade``, ``accede``, ``deadbeef``) and stay;
  - an ISO timestamp's ``2024-05-01T12`` reads ``<n>-<n>-<n>T<n>`` (the rest of it is
    numbers), as one written with a space does.
- **Numbers** standing alone become ``<n>``; digits inside words (``S3``, ``mp4``,
  ``p24``, ``worker42``) are kept: they name things.
- Whitespace is collapsed, and the signature cut at 120 characters.

Where one outage may still show more than one signature: a hex id that happens to be all
letters reads as a word (about one 8-character id in 2,500); a token without a
digit reads as a word (about one base62 id of 16 characters in seventeen, of 26 one in a
hundred; a ULID almost never); and a random token that reads as words (``_random``).
Those few each show as a signature of their own, counted among the others.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from services.estate.signature_ids import quoted, url, word

SIGNATURE_LENGTH = 120
SIGNATURE_SAMPLE = 2000  # triage groups the newest this many dead rows by signature
NO_ERROR = "(no error recorded)"

Replacement = str | Callable[[re.Match[str]], str]

# A run of letters, digits, _ and - with a letter and a digit in it (matched whole, so
# the scan never restarts inside one).
WORD = (
    r"(?<![0-9A-Za-z_-])(?:[0-9_-]*+[A-Za-z][A-Za-z_-]*+[0-9]|[A-Za-z_-]*+[0-9][0-9_-]*+"
    r"[A-Za-z])[0-9A-Za-z_-]*+"
)

# An HTTP status (100-599) after "status" or "HTTP" (status 503, status_code=429,
# HTTP/1.1 404) says the cause: kept. (Where its reason follows, "<n> Service
# Unavailable", the reason says it.)
_STATUS_WORDS = (  # grouped by length: a look behind reads a fixed number of characters
    "http",
    "status|http/2",
    "http/1.1|http/1.0|http/<n>",
    "statuscode",
    "status code|status_code",
    "http/<n>.<n>",
)
_STATUS = "|".join(
    f"(?<=(?i:{words.replace('.', '[.]')}){seps}[0-9]{{3}})"
    for words in _STATUS_WORDS
    for seps in ("[ =:]", '(?:: |":)', '": ')
)
# A number standing alone (no letter or digit just before it), but an HTTP status
NUMBER = (
    r"[0-9](?<![A-Za-z0-9][0-9])"
    rf"(?!(?<=[ =:][1-5])[0-9]{{2}}(?![0-9])(?:{_STATUS}))[0-9]*+"
)

# A URL runs to a space, a quote, an angle bracket or a closing bracket; over a marker
# of what was taken out (<id>, <v>, <n> ...), so that a signature's own URL reads as one
_URL_BODY = r"(?:[^\s'\"<>)\]}]|<(?:id|v|n|hex|uuid|path)>)*+"

# The rules, (pattern, replacement) applied in this order. ``_signature`` makes the same
# signature faster (a test holds the two to each other): it skips a rule that cannot
# match, finds URLs from their "://" and the words of the word rule from their first
# digit (digits are few, so the scan skips to them) and reads each back to its start.
RULES: tuple[tuple[str, Replacement], ...] = (
    (r"(?<![A-Za-z])[A-Za-z][A-Za-z0-9+.-]*+://" + _URL_BODY, lambda m: url(m.group(0))),
    # a value already taken out ('<v>') is matched too, so that its closing quote is never
    # read as the opening of another
    (r"(['\"])(<v>|[^'\"\s<]{0,40}[A-Za-z0-9][^'\"\s<]{0,40})\1", quoted),
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<uuid>"),
    (r"0x[0-9a-fA-F]+", "<hex>"),
    (WORD, lambda m: word(m.group(0))),
    (NUMBER, "<n>"),
    (r"\s+", " "),
)
# ``_signature`` skips the quote, UUID and 0x rules where the text lacks what they match.
_QUOTED, _UUIDS, _HEX_NUMBER = (re.compile(pattern) for pattern, _ in RULES[1:4])
_SCHEME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-"
_BODY = re.compile(_URL_BODY)
# The first digit of a word the word rule takes: one with a letter after it (digits, _
# and - between), or right after a letter, _ or -; matched on to the word's end.
_WORD_SPLIT = re.compile(
    r"([0-9](?<![0-9][0-9])(?:[0-9_-]*+[A-Za-z]|(?<=[A-Za-z_-][0-9]))[0-9A-Za-z_-]*+)"
)
_HEX_DIGITS = "0123456789abcdefABCDEF"
_WORD_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-"
_NUMBER = re.compile(RULES[5][0])
_SIX = re.compile(r"[0-9A-Za-z]{6}")
_PLAIN_NUMBER = re.compile(r"[0-9](?<![A-Za-z0-9][0-9])[0-9]*+")  # where no status can be


def _urls(text: str) -> str:
    """The URL rule, each URL found from its "://" and read back to its scheme's start."""
    out: list[str] = []
    done = 0
    at = text.find("://")
    while at != -1:
        before = text[done:at]
        scheme = before[len(before.rstrip(_SCHEME_CHARS)) :].lstrip("0123456789+.-")
        start = at - len(scheme)
        if scheme:
            end = _BODY.match(text, at + 3).end()  # type: ignore[union-attr]
            out.append(text[done:start])
            out.append(url(text[start:end]))
            done = end
            at = text.find("://", end)
        else:
            at = text.find("://", at + 3)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _words(text: str) -> str:
    """The word rule, each word found from a digit (the scan skips to digits, which are
    few) and read back to its start."""
    chunks = _WORD_SPLIT.split(text)
    if len(chunks) == 1:
        return text
    changed = False
    for i in range(1, len(chunks), 2):
        before = chunks[i - 1]
        stem = before.rstrip(_WORD_CHARS)
        found = before[len(stem) :] + chunks[i]
        if len(found) < 6:  # s3, mp4, v1, p24: names, and too short for an id
            continue
        if len(found) < 16:
            if "_" not in found and "-" not in found:
                if found.strip(_HEX_DIGITS):  # worker42, H264Decoder: a name, not hex
                    continue
                chunks[i - 1], chunks[i] = stem, "<n>"
                changed = True
                continue
            if not _SIX.search(found) and "T" not in found:  # bms-12: no part an id could be
                continue
        made = word(found)
        if made != found:
            chunks[i - 1], chunks[i] = stem, made
            changed = True
    return "".join(chunks) if changed else text


# The rules before ids of every shape were taken out (the whole URL as ``<url>``, hex and
# token ids and quoted values kept): a plan frozen by that version may still be running,
# and its rows' signatures were made by them (``earlier_signature``).
EARLIER_RULES: tuple[tuple[str, str], ...] = (
    (r"[A-Za-z][A-Za-z0-9+.-]*://[^ \t\r\n]+", "<url>"),
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<uuid>"),
    (r"0x[0-9a-fA-F]+", "<hex>"),
    (r"(?<![A-Za-z0-9])[0-9]+", "<n>"),
    (r"[ \t\r\n]+", " "),
)
_EARLIER = tuple((re.compile(p), r) for p, r in EARLIER_RULES)


def error_signature(text: str | None) -> str | None:
    """The signature of one error text (None stays None).

    Dead letters share their errors (ten thousand rows of one incident carry a few dozen
    texts), so the signatures of texts up to ``_CACHED_LENGTH`` are kept (at most
    ``_CACHED`` of them, about 2.5 MB): a freeze of ten thousand rows then runs the rules
    a few dozen times, not fifty thousand. Longer texts, rarely repeated, are not kept."""
    if text is None:
        return None
    if len(text) <= _CACHED_LENGTH:
        return _cached_signature(text)
    return _signature(text)


_CACHED = 4096
_CACHED_LENGTH = 512


def _signature(text: str) -> str:
    return taken_out(text)[:SIGNATURE_LENGTH].rstrip(" ")


def taken_out(text: str) -> str:
    """The text with every rule applied (``RULES``), before the cut: what a signature is
    the first ``SIGNATURE_LENGTH`` characters of. Applied to what it returns, it returns
    that again (the cut, which may split a word, is not): the rules are applied until
    they change nothing. Once is enough but where a URL's scheme follows a digit
    ("00A://"): the word rule then takes the digits with the scheme's first letters, and
    a second pass reads the URL anew."""
    once = _one_pass(text)
    if _scheme_after_digit(text):
        while (again := _one_pass(once)) != once:
            once = again
    return once


def _scheme_after_digit(text: str) -> bool:
    return "://" in text and _SCHEME_AFTER_DIGIT.search(text) is not None


_SCHEME_AFTER_DIGIT = re.compile(r"[0-9][A-Za-z0-9+.-]*://")


def _one_pass(text: str) -> str:
    if "://" in text:
        text = _urls(text)
    if "'" in text or '"' in text:
        text = _QUOTED.sub(quoted, text)
    if text.count("-") >= 4:
        text = _UUIDS.sub("<uuid>", text)
    if "0x" in text:
        text = _HEX_NUMBER.sub("<hex>", text)
    text = _words(text)
    lower = text.lower()  # an HTTP status is kept only after "status" or "http"
    number = _NUMBER if "status" in lower or "http" in lower else _PLAIN_NUMBER
    text = number.sub("<n>", text)
    # a space is the one whitespace character that is printable: a printable text without
    # two spaces in a row has no whitespace to collapse
    return " ".join(text.split()) if "  " in text or not text.isprintable() else text.strip(" ")


_cached_signature = lru_cache(maxsize=_CACHED)(_signature)


def earlier_signature(text: str | None) -> str | None:
    """The signature an earlier version made of ``text`` (``EARLIER_RULES``): what a plan
    frozen then compares a job that died again with."""
    if text is None:
        return None
    for pattern, replacement in _EARLIER:
        text = pattern.sub(replacement, text)
    return text.strip(" ")[:SIGNATURE_LENGTH].rstrip(" ")


@dataclass(frozen=True)
class Top:
    """The most frequent values of a count, and what the cut leaves out: ``groups``
    distinct values among ``counted`` in all, of which ``rows`` are the first."""

    rows: list[tuple[str | None, int]]
    groups: int
    counted: int

    @property
    def others(self) -> int:
        """How many of the counted values are in the groups left out."""
        return self.counted - sum(n for _, n in self.rows)


def top_of(values: Iterable[str | None], limit: int = 10) -> Top:
    """The ``limit`` most frequent values with their counts, most frequent first (ties in
    Python's order of the texts, None last: the same on every database), and how many
    distinct values and values in all there were."""
    counted = Counter(values)
    rows = sorted(
        counted.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] if kv[0] is not None else "")
    )[:limit]
    return Top(rows, len(counted), counted.total())


def top_counts(values: Iterable[str | None], limit: int = 10) -> list[tuple[str | None, int]]:
    """The ``limit`` most frequent values with their counts (``top_of``'s rows)."""
    return top_of(values, limit).rows


def top_signatures_of(errors: Iterable[str | None], limit: int = 10) -> Top:
    """The most frequent signatures of a sample of error texts, and what the cut leaves
    out. Computed here rather than by a ``regexp_replace`` chain in the database: the
    rules cost PostgreSQL 10-25 us a text, Python a few, and repeated texts nothing (their
    signatures are kept)."""
    return top_of((error_signature(e) for e in errors), limit)


def top_signatures(errors: Iterable[str | None], limit: int = 10) -> list[tuple[str | None, int]]:
    """The most frequent signatures of a sample of error texts (``top_signatures_of``'s
    rows)."""
    return top_signatures_of(errors, limit).rows


def display_signature(signature: str | None) -> str:
    return NO_ERROR if signature is None or signature == "" else signature
