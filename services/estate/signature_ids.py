"""What an id looks like, for the signature rules (``services/estate/signature.py``): a
word of letters and digits that is a hex id or a random token, a quoted value, the ids in
a URL. Each test tells an id from a name; the module docstring of ``signature`` says the
rules and what they keep.
"""

from __future__ import annotations

import re

_HEX = re.compile(r"(?=[a-fA-F]*[0-9])(?=[0-9]*[a-fA-F])[0-9a-fA-F]{6,}")
_PIECES = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_HEX_DIGITS = "0123456789abcdefABCDEF"
_DATE_HOUR = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}")
_TURNS = re.compile(r"[0-9](?=[A-Za-z])|[A-Za-z](?=[0-9])")
_PARTS = re.compile(r"([_-]+)")
_NAME = re.compile(r"[A-Za-z_]+(?:(?:\.|::)[A-Za-z_]+)*")
_SHORT_CODE = re.compile(r"[vV][0-9]+(?:\.[0-9]+)*|[A-Za-z]{1,3}[0-9]{1,3}")
_EXTENSION = re.compile(r"[A-Za-z][A-Za-z0-9]{0,4}")
_URL_PARTS = re.compile(
    r"([^:]*://)([^/?#@]*@)?([^/?#:]*)(:[^/?#]*)?(/[^?#]*)?(\?[^#]*)?(#.*)?", re.DOTALL
)
_HAS_DIGIT = re.compile(r"[0-9]")
# Where a URL's path is an API's, its shape kept (the path of any other is a key or a name)
_API_SCHEMES = frozenset({"http://", "https://", "ws://", "wss://"})
_ID_MARKS = re.compile(r"[@%+=~]|[0-9][^0-9]*[0-9]")


def _random(part: str) -> bool:
    """Whether a run of letters and digits (no ``_`` or ``-``) is a random id rather than
    words: broken at its capitals and digits into pieces, a random one's pieces are short
    (2.8 characters or fewer on average; an identifier's are words), or it turns between
    letters and digits three times or more (a ULID's ``3K8Q9``; ``ISO8601DateTime``
    turns twice). Random ids of 16 characters are told about 19 times in 20, of 26 about
    99 times in 100 (a ULID's 998 in 1,000)."""
    return len(part) <= 2.8 * len(_PIECES.findall(part)) or len(_TURNS.findall(part)) >= 3


def _token_id(token: str) -> bool:
    """Whether a run of 16 or more letters, digits, ``_`` and ``-`` is a token id (a ULID,
    base64url, a Stripe-like ``pi_3NfK2a9xQabcDEF12345``): one of its parts of 8 or
    more characters between ``_`` and ``-`` is random, not hex (a hex part is ``<n>``
    alone, its prefix kept: ``req_<n>``)."""
    return any(
        len(part) >= 8 and not _HEX.fullmatch(part) and _random(part)
        for part in _PARTS.split(token)[::2]
    )


def _hex(part: str) -> bool:
    """Whether a run of letters and digits is a hex id: 6 or more hex digits with a digit
    and a letter among them (``_HEX``, without a regular expression)."""
    return (
        len(part) >= 6 and not part.strip(_HEX_DIGITS) and not part.isdigit() and not part.isalpha()
    )


def word(text: str) -> str:
    """A word (a run of 6 or more letters, digits, ``_`` and ``-`` with a letter and a
    digit in it) with its ids taken out; its numbers are left to the number rule."""
    if len(text) < 6:  # s3, mp4, v1, p24: names, and too short for an id
        return text
    if "_" not in text and "-" not in text:
        if not text.strip(_HEX_DIGITS):  # hex, with a letter and a digit in it
            return "<n>"  # as a hex id that happens to be all digits reads
        return "<id>" if len(text) >= 16 and _random(text) else text
    if _DATE_HOUR.fullmatch(text):  # 2024-05-01T12, an ISO timestamp's start
        return "<n>-<n>-<n>T<n>"
    parts = _PARTS.split(text)
    long = len(text) >= 16
    changed = False
    for i in range(0, len(parts), 2):
        part = parts[i]
        if _hex(part):
            parts[i] = "<n>"
            changed = True
        elif long and len(part) >= 8 and _random(part):
            return "<id>"
    return "".join(parts) if changed else text


def quoted(m: re.Match[str]) -> str:
    inner = m.group(2)
    if inner == "<v>" or _NAME.fullmatch(inner) or "://" in inner:
        return m.group(0)  # a name (a column, a constraint, a class) or a URL: kept
    return f"{m.group(1)}<v>{m.group(1)}"


def _is_id(text: str) -> bool:
    """Whether a URL's path segment (or host label) is an id rather than a name: a number;
    one with two digits or more (but a short code: ``v1``, ``v2.3``, ``s3``, ``h264``) or
    with ``@%+=~`` in it, such as a UUID or ``ch_3NfK2a9xQ``; a hex id; or a token of 10
    characters or more."""
    if not text or text.isalpha():
        return False
    if text.isdigit():
        return True
    if _SHORT_CODE.fullmatch(text):
        return False
    if _ID_MARKS.search(text):
        return True
    return _HEX.fullmatch(text) is not None or (len(text) >= 10 and _token_id(text))


def _segment(segment: str) -> str:
    """A path segment, an id in it taken out (a file name keeps its extension)."""
    if segment.isalpha() or not segment or _SHORT_CODE.fullmatch(segment):
        return segment  # a name, or none (v1, s3, h264: names)
    stem, dot, extension = segment.rpartition(".")
    if stem and _EXTENSION.fullmatch(extension):
        return ("<id>" if _is_id(stem) else stem) + dot + extension
    return "<id>" if _is_id(segment) else segment


def _label(label: str) -> str:
    """A host's label, an id in it taken out (numbers are left to the number rule)."""
    return label if label.isalpha() or label.isdigit() or not _is_id(label) else "<id>"


def _query(query: str) -> str:
    """A URL's query (from its "?") with its values taken out, its keys kept; a part that
    is no key is a value too (a URL passed on in it, a token)."""
    pairs = query[1:].split("&")
    for i, pair in enumerate(pairs):
        key, eq, value = pair.partition("=")
        if eq:
            pairs[i] = f"{key}=<v>" if value else pair
        elif pair and not _NAME.fullmatch(pair) and pair != "<v>":
            pairs[i] = "<v>"
    return "?" + "&".join(pairs)


def url(whole: str) -> str:
    """A URL with the ids in its host, the ids in its path (an API's: http, https, ws,
    wss) or its whole path (an object's key or a file's name: s3, gs, file ...) and the
    values of its query taken out."""
    url = whole.rstrip(".,;:!?")
    parts = _URL_PARTS.fullmatch(url)
    if parts is None:  # pragma: no cover - every URL the rule finds has these parts
        return whole
    scheme, user, host, port, path, query, fragment = parts.groups()
    if not host.isalpha() and _HAS_DIGIT.search(host):
        host = ".".join([_label(label) for label in host.split(".")])
    out = [scheme, "<v>@" if user and user != "@" else user or "", host, port or ""]
    if path and scheme.lower() in _API_SCHEMES:
        out.append("/".join([_segment(s) if s and not s.isalpha() else s for s in path.split("/")]))
    elif path:
        out.append("/<path>" if len(path) > 1 and path != "/<path>" else path)
    if query:
        out.append(_query(query))
    if fragment:
        out.append("#<v>" if len(fragment) > 1 else "#")
    out.append(whole[len(url) :])
    return "".join(out)
