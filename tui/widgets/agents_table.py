"""One row per agent (process or rank) with PyTorch's counters; the busiest one is marked."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.widgets.data import AgentRow
from tui.widgets.fmt import GIB_UNIT, Unit, figure, unit_for


class AgentsTable(DataTable):
    DEFAULT_CSS = """
    AgentsTable { height: auto; max-height: 10; }
    """

    # bytes in the table's unit (`unit`, named in the title above it: the screen's); short headers and the
    # busiest's ★ in the pid cell: the table fits 76 columns (80x24)
    COLUMNS = ("pid", "agent", "device", "alloc", "resvd", "gap", "retry", "OOMs")

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self._shown: tuple[AgentRow, ...] | None = None
        self.unit: Unit = GIB_UNIT

    def on_mount(self) -> None:
        if not self.columns:  # rows given before it was mounted (the Live screen's first view) brought theirs
            self._add_columns()

    def _add_columns(self) -> None:
        # as Text, as every cell: a str is parsed as Rich markup, whose first use imports Rich's table of
        # emoji names (0.5 MiB resident, for figures that have none)
        self.add_columns(*(Text(name) for name in self.COLUMNS))

    def update_rows(self, rows: tuple[AgentRow, ...]) -> bool:
        if rows == self._shown:
            return False
        self._shown = rows
        self.unit = unit = unit_for(v for r in rows for v in (r.allocated, r.reserved, r.gap))
        self.clear(columns=True)  # columns too: their widths then fit the rows shown now, not any before
        self._add_columns()
        for r in rows:
            style = "bold" if r.busiest else ""
            pid = Text()
            pid.append("★" if r.busiest else " ", style="bold magenta")
            pid.append(str(r.pid), style=style)
            self.add_row(
                pid,
                Text(r.label, style=style),
                Text(r.where, style=style),
                Text(figure(r.allocated, unit)),  # (Text, not str: see _add_columns)
                Text(figure(r.reserved, unit)),
                Text(figure(r.gap, unit), style="red" if r.gap and r.gap > 2**30 else ""),
                Text("—" if r.retries is None else str(r.retries)),
                Text("—" if r.ooms is None else str(r.ooms)),
                key=r.key or None,  # one row per agent and device: the pid alone repeats (DuplicateKey)
            )
        return True
