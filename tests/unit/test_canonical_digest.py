"""Hashing an audit event's canonical JSON piece by piece gives the same bytes, so the same
seal, as serializing it whole: events sealed before and after verify alike."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from services import jsonable
from services.jsonable import dumps_bytes, update_canonical

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)),  # lone surrogates are not JSON
    max_size=60,
)
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    texts,
    st.lists(texts, max_size=3),
    st.dictionaries(texts, texts, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(row=st.dictionaries(texts, values, max_size=6), piece=st.integers(1, 7))
@example(row={"details": 'a "quoted" \\ back\tslash\n\x00 é ✓ 🦆 ' * 3, "x": 1}, piece=2)
@example(row={"a": "qb-large-text-0-", "b": "x" * 40, "c": "y" * 40}, piece=5)
def test_piecewise_hash_is_the_whole_hash(row: dict[str, Any], piece: int) -> None:
    whole = hashlib.sha256(dumps_bytes(row, sort_keys=True)).hexdigest()
    h = hashlib.sha256()
    update_canonical(h, row, piece=piece, large=8)  # every text over 8 characters in pieces
    assert h.hexdigest() == whole


def test_a_large_event_is_sealed_as_before() -> None:
    """A real event's shape with megabytes of details: sha256 and HMAC alike."""
    details = jsonable.canonical(
        {"before": [{"id": n, "error": f'exit "{n}"\n'} for n in range(40_000)]}
    )
    row = {
        "occurred_at": datetime(2026, 12, 1, 7, 0, tzinfo=UTC),
        "action": "change.executed",
        "actor_person": "bob",
        "details": details,
        "prev_hash": "0" * 64,
    }
    assert len(details) > jsonable.LARGE_TEXT
    h = hashlib.sha256()
    update_canonical(h, row)
    assert h.hexdigest() == hashlib.sha256(dumps_bytes(row, sort_keys=True)).hexdigest()
    keyed = hmac.new(b"k" * 32, digestmod=hashlib.sha256)
    update_canonical(keyed, row)
    whole = hmac.new(b"k" * 32, dumps_bytes(row, sort_keys=True), hashlib.sha256)
    assert keyed.hexdigest() == whole.hexdigest()


@pytest.mark.parametrize("pad", [0, 2 << 20], ids=["small document", "large document"])
def test_large_and_small_documents_read_numbers_alike(pad: int) -> None:
    """Documents over a megabyte go to another parser; numbers read the same either way."""
    filler = ', "pad": "' + "x" * pad + '"'
    read = jsonable.loads(
        '{"big": 123456789012345678901234567890, "max": 18446744073709551615, "f": 1.5'
        + filler
        + "}"
    )
    assert read["big"] == pytest.approx(1.2345678901234568e29) and isinstance(read["big"], float)
    assert read["max"] == 18446744073709551615 and isinstance(read["max"], int)
    assert read["f"] == 1.5
    for bad in ("NaN", "Infinity", "1e400"):
        with pytest.raises(ValueError):
            jsonable.loads('{"n": ' + bad + filler + "}")
