"""The report's table: every line of the frame as wide as the others in terminal cells,
numbers right-justified, sections apart, and wide characters kept in their columns."""

from __future__ import annotations

from rich.cells import cell_len

from recordsync.service.commands.text_table import Column, table_lines

COLUMNS = [Column("game"), Column("rounds", right=True)]


def test_every_framed_line_is_as_wide_as_the_header_with_wide_characters() -> None:
    rows = [["スロット", "1"], ["Nolimit Cíty", "12,345"], ["a", "7"]]
    lines = list(table_lines(COLUMNS, [rows], title="t", caption="c"))
    framed = lines[1:-1]
    assert {cell_len(line) for line in framed} == {cell_len(framed[0])}
    assert lines[0].strip() == "t"
    assert lines[-1].strip() == "c"
    body = {line.split("│")[1].strip(): line for line in framed if line.startswith("│")}
    assert body["スロット"].split("│")[2] == "      1 "
    assert body["Nolimit Cíty"].split("│")[2] == " 12,345 "


def test_sections_are_ruled_apart_and_the_header_framed_heavy() -> None:
    lines = list(table_lines(COLUMNS, [[["a", "1"]], [["total", "1"]]]))
    assert [line[0] for line in lines] == ["┏", "┃", "┡", "│", "├", "│", "└"]


def test_a_hundred_thousand_rows_are_drawn_a_line_each() -> None:
    rows = [[f"player-{n}", f"{n:,}"] for n in range(100_000)]
    lines = list(table_lines(COLUMNS, [rows]))
    assert len(lines) == 100_000 + 4
    assert lines[-2] == "│ player-99999 │ 99,999 │"
