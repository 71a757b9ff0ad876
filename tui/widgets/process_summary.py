"""The Live screen's top processes: a plain table (no cursor, no scrolling), the cheapest thing to redraw.

The Processes screen keeps the interactive ProcessTable (sortable, filterable); here the rows only change
when a figure at display resolution changes, and a redraw renders one small Rich table.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.widgets.data import ProcessRow
from tui.widgets.fmt import GIB_UNIT
from tui.widgets.process_rows import columns, row_cells, row_style, sort_rows, table_unit


class ProcessSummary(Widget):
    DEFAULT_CSS = """
    ProcessSummary { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, max_rows: int = 12, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_rows = max_rows
        self._rows: list[ProcessRow] = []
        self._all: tuple[ProcessRow, ...] = ()
        self._shown: tuple[tuple[str, ...], ...] | None = None
        self.unit = GIB_UNIT
        self.redraw_count = 0

    @property
    def shown(self) -> tuple[tuple[str, ...], ...]:
        """The cells on screen, top row first (what a user reads)."""
        return self._shown or ()

    def set_max_rows(self, max_rows: int) -> None:
        if max_rows != self.max_rows:
            self.max_rows = max_rows
            self._shown = None
            self.update_rows(self._all)

    def update_rows(self, rows: tuple[ProcessRow, ...]) -> bool:
        if rows is self._all and self._shown is not None:
            return False  # the same rows (the app keeps them between the collector's rescans)
        self._all = rows
        # kernel threads hold no resident memory of their own: not "memory users"
        top = sort_rows(tuple(r for r in rows if r.rss > 0), "rss")[: self.max_rows]
        unit = table_unit(top)
        cells = tuple(row_cells(r, unit) for r in top)
        if cells == self._shown and unit == self.unit:
            return False
        same_height = self._shown is not None and len(cells) == len(self._shown)
        self._rows, self._shown, self.unit = top, cells, unit
        self.redraw_count += 1
        self.refresh(layout=not same_height)
        return True

    def render(self) -> Text:
        if not self._shown:
            return Text("no process sample yet", style="italic")
        # the command column takes what the fixed columns leave; the user column goes first when the
        # command would get fewer than COMMAND_MIN cells (the Processes screen, 4, still has it)
        fixed = sum(abs(w) for w in WIDTHS) + len(WIDTHS)
        with_user = self.size.width - fixed >= COMMAND_MIN
        if not with_user:
            fixed -= abs(WIDTHS[0]) + 1
        name_width = max(8, min(40, self.size.width - fixed))
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(_line(columns(self.unit), name_width, with_user), style="bold")
        for row, cells in zip(self._rows, self._shown, strict=True):
            text.append("\n")
            text.append(_line(cells, name_width, with_user), style=row_style(row))
        return text


# pid, user, RSS, GPU, growth, flag: fixed widths (negative: left-aligned); the name goes after the pid
WIDTHS = (-8, -8, 7, 7, 8, -4)
COMMAND_MIN = 26  # "● python demo_workload.py" whole


def _line(cells: tuple[str, ...], name_width: int, with_user: bool = True) -> str:
    pid, name, *rest = cells
    parts = [f"{pid:<8}", f"{name[:name_width]:<{name_width}}"]
    for i, (cell, width) in enumerate(zip(rest, WIDTHS[1:], strict=True)):
        if i == 0 and not with_user:
            continue
        parts.append(f"{cell[:-width]:<{-width}}" if width < 0 else f"{cell:>{width}}")
    return " ".join(parts).rstrip()
