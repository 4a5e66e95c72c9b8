"""Reading what queuebot said."""

from __future__ import annotations


def in_order(text: str, *parts: str) -> None:
    """Each of ``parts`` in ``text``, each after the one before."""
    at = 0
    for part in parts:
        found = text.find(part, at)
        assert found >= 0, f"{part!r} is not after {text[max(at - 200, 0) : at]!r} in:\n{text}"
        at = found + len(part)
