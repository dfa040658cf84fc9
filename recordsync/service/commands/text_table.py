"""A table as lines of text, drawn as rich draws its tables, in time linear in its cells.

``report`` prints a row per game, provider or player and currency: at a year's warehouse
that is hundreds of rows by game and tens of thousands by player, and rich's table, which
measures every cell several times to fit a terminal, took half a second of CPU for 400 rows
and grows past a minute by player.  This one measures each cell once and never wraps: a
terminal narrower than the table folds its lines, a pipe receives them whole.  Widths are
terminal cells (``rich.cells.cell_len``), so wide characters keep the columns aligned.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    right: bool = False  # numbers are right-justified


def _pad(value: str, width: int, column: Column) -> str:
    gap = " " * (width - cell_len(value))
    return gap + value if column.right else value + gap


def _centred(text: str, width: int) -> str:
    spare = max(0, width - cell_len(text))
    return (" " * (spare // 2) + text).rstrip()


def table_lines(
    columns: Sequence[Column],
    sections: Sequence[Sequence[Sequence[str]]],
    *,
    title: str | None = None,
    caption: str | None = None,
) -> Iterator[str]:
    """The table's lines: the title centred above, the header in a heavy frame, each section
    of rows below a rule, the caption centred beneath."""
    widths = [cell_len(column.header) for column in columns]
    for rows in sections:
        for row in rows:
            for index, cell in enumerate(row):
                widths[index] = max(widths[index], cell_len(cell))
    spans = ["━" * (width + 2) for width in widths]
    thin = ["─" * (width + 2) for width in widths]
    total = sum(widths) + 3 * len(widths) + 1
    if title:
        yield _centred(title, total)
    yield "┏" + "┳".join(spans) + "┓"
    yield (
        "┃"
        + "┃".join(f" {_pad(c.header, w, c)} " for c, w in zip(columns, widths, strict=True))
        + "┃"
    )
    yield "┡" + "╇".join(spans) + "┩"
    for number, rows in enumerate(sections):
        if number:
            yield "├" + "┼".join(thin) + "┤"
        for row in rows:
            cells = zip(row, columns, widths, strict=True)
            yield "│" + "│".join(f" {_pad(cell, w, c)} " for cell, c, w in cells) + "│"
    yield "└" + "┴".join(thin) + "┘"
    if caption:
        yield _centred(caption, total)
