"""Processes by memory, with growth over the window; new and fast-growing processes stand out."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.widgets.data import ProcessRow
from tui.widgets.fmt import GIB_UNIT
from tui.widgets.process_rows import columns, filter_rows, row_cells, row_style, sort_rows, table_unit


class ProcessTable(DataTable):
    """Rebuilds its rows only when what it would display changes (the figures as written, in the unit of the
    rows shown: fmt.unit_for)."""

    DEFAULT_CSS = """
    ProcessTable { height: auto; max-height: 100%; }
    """

    def __init__(self, *, max_rows: int | None = None, sort_key: str = "rss", **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.max_rows = max_rows
        self.sort_key = sort_key
        self.filter_text = ""
        self._rows: tuple[ProcessRow, ...] = ()
        self._shown: tuple[tuple[str, ...], ...] | None = None
        self._shown_pids: tuple[int, ...] = ()
        self._column_keys: list = []
        self.unit = GIB_UNIT
        self.rebuild_count = 0  # full rebuilds (rows added, removed or reordered)
        self.cell_updates = 0  # single cells rewritten in place

    def on_mount(self) -> None:
        self._column_keys = self.add_columns(*columns(self.unit))
        self._render_rows()

    def update_rows(self, rows: tuple[ProcessRow, ...]) -> bool:
        self._rows = rows
        return self._render_rows()

    def set_sort(self, key: str) -> None:
        sort_rows((), key)  # validates the key
        self.sort_key = key
        self._render_rows()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._render_rows()

    def visible_rows(self) -> list[ProcessRow]:
        rows = filter_rows(sort_rows(self._rows, self.sort_key), self.filter_text)
        return rows[: self.max_rows] if self.max_rows is not None else rows

    def _render_rows(self) -> bool:
        if not self.is_mounted:
            return False
        rows = self.visible_rows()
        unit = table_unit(rows)
        if unit != self.unit:  # the headers name the unit: new columns, every row rebuilt
            self.unit = unit
            self.clear(columns=True)
            self._column_keys = self.add_columns(*columns(unit))
            self._shown = None
        cells = tuple(row_cells(r, unit) for r in rows)
        if cells == self._shown:
            return False
        pids = tuple(r.pid for r in rows)
        previous = self._shown
        self._shown = cells
        if previous is not None and pids == self._shown_pids:
            # same rows in the same order: rewrite only the cells whose text changed (a full rebuild
            # re-lays out the whole table, and RSS figures move a little every tick)
            for row, new, old in zip(rows, cells, previous, strict=True):
                if new == old:
                    continue
                style = row_style(row)
                restyle = new[-1] != old[-1]  # the flag (and so the row's style) changed
                for column, (new_cell, old_cell) in enumerate(zip(new, old, strict=True)):
                    if restyle or new_cell != old_cell:
                        self.update_cell(str(row.pid), self._column_keys[column], Text(new_cell, style=style))
                        self.cell_updates += 1
            self._drop_stale_renders()
            return True
        self._shown_pids = pids
        self.rebuild_count += 1
        self.clear()
        for row, text in zip(rows, cells, strict=True):
            style = row_style(row)
            self.add_row(*(Text(c, style=style) for c in text), key=str(row.pid))
        return True

    def _drop_stale_renders(self) -> None:
        """DataTable keys every render it caches (cells, rows, lines) by its update count, which each
        update_cell moves, so none of them can be hit again; they stayed until its caches were full (10,000
        cells, 1,000 rows and lines): 11.3 MiB once full, within 100 ticks of 15 rows whose figures change
        (bench/process_table_memory.py), on the Live screen. DataTable clears them itself when rows are
        added or removed (_clear_caches); a Textual without that method leaves them, and
        tests/tui/test_widgets.py fails."""
        clear = getattr(self, "_clear_caches", None)
        if clear is not None:
            clear()
