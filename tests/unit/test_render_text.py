"""Plain-text rendering of platform-neutral messages (bot/render_text.py): what the console
prints and what fallbacks show."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.render_text import MAX_CELL, render_message
from services.message import Actions, Button, Fields, Heading, Message, Table, Text


def render_table(table: Table) -> list[str]:
    return render_message(Message("summary", (table,))).splitlines()


def test_message_without_blocks_is_its_summary() -> None:
    assert render_message(Message("Queue clips: 12 messages")) == "Queue clips: 12 messages"


def test_heading_text_and_fields() -> None:
    message = Message(
        "s",
        (
            Heading("Triage: queue clips"),
            Text("Nothing is stuck."),
            Fields((("dead", "150"), ("failed", "70"))),
        ),
    )
    assert render_message(message) == (
        "== Triage: queue clips ==\nNothing is stuck.\ndead: 150  failed: 70"
    )


def test_numeric_columns_are_right_aligned() -> None:
    table = Table(
        ("reason", "rows", "share"),
        (("timeout", "5", "0.4%"), ("NoSuchKey", "1,234", "99.6%")),
        numeric=(1, 2),
    )
    assert render_table(table) == [
        "reason      rows  share",
        "timeout        5   0.4%",
        "NoSuchKey  1,234  99.6%",
    ]


def test_text_columns_are_left_aligned_and_the_last_is_not_padded() -> None:
    table = Table(("job", "status", "detail"), (("1", "dead", "x"), ("1234", "failed", "long")))
    lines = render_table(table)
    assert lines == [
        "job   status  detail",
        "1     dead    x",
        "1234  failed  long",
    ]
    assert all(line == line.rstrip() for line in lines)


def test_numbers_line_up_on_their_last_digit() -> None:
    table = Table(("key", "n"), (("a", "1"), ("b", "22"), ("c", "333")), numeric=(1,))
    lines = render_table(table)
    ends = {len(line) for line in lines}
    assert len(ends) == 1  # every row ends in the same column


def test_long_cells_are_clipped() -> None:
    long = "NoSuchKey: " + "x" * 300
    lines = render_table(Table(("rows", "signature"), (("3", long),), numeric=(0,)))
    assert lines[0] == "rows  signature"
    assert lines[1].startswith("   3  ")
    cell = lines[1][len("   3  ") :]
    assert len(cell) == MAX_CELL
    assert cell.endswith("…")
    assert cell.startswith("NoSuchKey: xxx")
    assert long not in lines[1]


def test_a_cell_of_exactly_the_maximum_is_kept_whole() -> None:
    exact = "y" * MAX_CELL
    lines = render_table(Table(("v",), ((exact,),)))
    assert lines[1] == exact


def test_line_breaks_inside_a_cell_do_not_break_the_table() -> None:
    table = Table(("job", "error"), (("1", "first line\nsecond\tline\r\n  third"),))
    assert render_table(table) == ["job  error", "1    first line second line third"]


def test_table_title_and_empty_table() -> None:
    table = Table(("job", "status"), (), title="Stuck jobs")
    assert render_table(table) == ["-- Stuck jobs", "job  status"]


def test_actions_show_their_typed_command() -> None:
    actions = Actions(
        (
            Button("cr:approve:17", "Approve", style="primary", command="/queue approve CR-17"),
            Button("cr:reject:17", "Reject", style="danger", command="/queue reject CR-17"),
            Button("cr:details:17", "Details"),
        )
    )
    assert render_message(Message("s", (actions,))) == (
        "[Approve] /queue approve CR-17  [Reject] /queue reject CR-17  [Details]"
    )


def test_blocks_are_rendered_in_order_without_trailing_whitespace() -> None:
    message = Message(
        "s",
        (
            Heading("Change request CR-17"),
            Table(("a", "b"), (("1", ""),)),
            Actions((Button("cr:approve:17", "Approve", command="/queue approve CR-17"),)),
        ),
    )
    text = render_message(message)
    assert text.splitlines() == [
        "== Change request CR-17 ==",
        "a  b",
        "1",
        "[Approve] /queue approve CR-17",
    ]
    assert text == text.rstrip()


cells = st.text(max_size=150)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(*[cells] * n), max_size=6),
            st.sets(st.integers(0, n - 1)),
        )
    )
)
def test_every_row_is_one_line_and_columns_line_up(
    shape: tuple[int, list[tuple[str, ...]], set[int]],
) -> None:
    n, rows, numeric = shape
    # a last column "end" marks where each line's columns stop
    columns = (*(f"c{i}" for i in range(n)), "end")
    table = Table(columns, tuple((*r, "|") for r in rows), numeric=tuple(sorted(numeric)))
    lines = render_message(Message("s", (table,))).split("\n")
    assert len(lines) == len(rows) + 1
    stop = lines[0].index("end")
    assert stop <= n * (MAX_CELL + 2)
    for line in lines[1:]:
        assert line.endswith("|")
        assert len(line) == stop + 1
