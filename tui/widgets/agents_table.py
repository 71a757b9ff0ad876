"""One row per agent (process or rank) with PyTorch's counters; the busiest one is marked.

A plain table drawn as one Rich Text, as the process summary is: no cursor, no scrolling, nothing to select.
Textual's DataTable cost the Live screen 0.37 MiB of modules and its per-row render caches, for a table of a
few rows that changes only when a figure at display resolution does (issue 20's resident-memory target).
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.widgets.data import AgentRow
from tui.widgets.fmt import GIB_UNIT, Unit, figure, unit_for

# bytes in the table's unit (`unit`, named in the title above it: the screen's); short headers and the
# busiest's ★ in the pid cell: the table fits 76 columns (80x24)
COLUMNS = ("pid", "agent", "device", "alloc", "resvd", "gap", "retry", "OOMs")
COLUMN_GAP = "  "
FIRST_FIGURE = COLUMNS.index("alloc")  # figures from here on are right-aligned, so their places line up
GAP_WARN_BYTES = 2**30  # a reserved − allocated gap above this shows red


class AgentsTable(Widget):
    DEFAULT_CSS = """
    AgentsTable { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[AgentRow, ...] | None = None
        self._cells: tuple[tuple[Text, ...], ...] = ()
        self.unit: Unit = GIB_UNIT

    @property
    def row_count(self) -> int:
        return len(self._cells)

    def get_row_at(self, index: int) -> tuple[Text, ...]:
        """The cells of one row as drawn (the busiest's pid cell starts with ★)."""
        return self._cells[index]

    def update_rows(self, rows: tuple[AgentRow, ...]) -> bool:
        if rows == self._shown:
            return False
        same_height = self._shown is not None and len(rows) == len(self._shown)
        self._shown = rows
        self.unit = unit = unit_for(v for r in rows for v in (r.allocated, r.reserved, r.gap))
        self._cells = tuple(_cells(r, unit) for r in rows)
        self.refresh(layout=not same_height)
        return True

    def render(self) -> Text:
        header = tuple(Text(name, style="bold") for name in COLUMNS)
        table = (header, *self._cells)
        widths = [max(row[i].cell_len for row in table) for i in range(len(COLUMNS))]
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, row in enumerate(table):
            if n:
                text.append("\n")
            for i, cell in enumerate(row):
                pad = " " * (widths[i] - cell.cell_len)
                if i:
                    text.append(COLUMN_GAP)
                if i >= FIRST_FIGURE:
                    text.append(pad)
                text.append_text(cell)
                if i < FIRST_FIGURE:
                    text.append(pad)
        return text


def _cells(row: AgentRow, unit: Unit) -> tuple[Text, ...]:
    style = "bold" if row.busiest else ""
    pid = Text()
    pid.append("★" if row.busiest else " ", style="bold magenta")
    pid.append(str(row.pid), style=style)
    return (
        pid,
        Text(row.label, style=style),
        Text(row.where, style=style),
        Text(figure(row.allocated, unit)),
        Text(figure(row.reserved, unit)),
        Text(figure(row.gap, unit), style="red" if row.gap and row.gap > GAP_WARN_BYTES else ""),
        Text("—" if row.retries is None else str(row.retries)),
        Text("—" if row.ooms is None else str(row.ooms)),
    )
