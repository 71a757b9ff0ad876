"""Processes by memory, with growth over the window; new and fast-growing processes stand out."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.widgets.data import ProcessRow
from tui.widgets.fmt import gib_num, shown, signed_gib

SORT_KEYS: tuple[str, ...] = ("rss", "gpu", "growth", "pid", "name")
COLUMNS: tuple[str, ...] = ("pid", "command", "user", "RSS GiB", "GPU GiB", "Δ30s GiB", "")


def sort_rows(rows: tuple[ProcessRow, ...], key: str) -> list[ProcessRow]:
    """Largest first for sizes (compared at display resolution, so rows showing the same figure keep their
    pid order instead of swapping every tick), ascending for pid and name; unknown sizes last."""
    if key == "pid":
        return sorted(rows, key=lambda r: r.pid)
    if key == "name":
        return sorted(rows, key=lambda r: ((r.command or r.name).lower(), r.pid))
    if key == "gpu":
        return sorted(rows, key=lambda r: (r.gpu_bytes is None, -(shown(r.gpu_bytes) or 0), r.pid))
    if key == "growth":
        return sorted(rows, key=lambda r: (r.growth_bytes is None, -(shown(r.growth_bytes) or 0), r.pid))
    if key == "rss":
        return sorted(rows, key=lambda r: (-(shown(r.rss) or 0), r.pid))
    raise ValueError(f"unknown sort key {key!r}; choose one of {', '.join(SORT_KEYS)}")


def filter_rows(rows: list[ProcessRow], text: str) -> list[ProcessRow]:
    needle = text.strip().lower()
    if not needle:
        return rows
    return [
        r
        for r in rows
        if needle in r.name.lower()
        or needle in r.cmdline.lower()
        or needle in r.user.lower()
        or needle == str(r.pid)
    ]


class ProcessTable(DataTable):
    """Rebuilds its rows only when what it would display changes (figures are rounded to 0.01 GiB)."""

    DEFAULT_CSS = """
    ProcessTable { height: auto; max-height: 100%; }
    """

    COLUMNS = COLUMNS

    def __init__(self, *, max_rows: int | None = None, sort_key: str = "rss", **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.max_rows = max_rows
        self.sort_key = sort_key
        self.filter_text = ""
        self._rows: tuple[ProcessRow, ...] = ()
        self._shown: tuple[tuple[str, ...], ...] | None = None
        self._shown_pids: tuple[int, ...] = ()
        self._column_keys: list = []
        self.rebuild_count = 0  # full rebuilds (rows added, removed or reordered)
        self.cell_updates = 0  # single cells rewritten in place

    def on_mount(self) -> None:
        self._column_keys = self.add_columns(*self.COLUMNS)
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
        cells = tuple(row_cells(r) for r in rows)
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
            return True
        self._shown_pids = pids
        self.rebuild_count += 1
        self.clear()
        for row, text in zip(rows, cells, strict=True):
            style = row_style(row)
            self.add_row(*(Text(c, style=style) for c in text), key=str(row.pid))
        return True


def row_style(row: ProcessRow) -> str:
    return "bold red" if row.fast_growing else ("bold yellow" if row.is_new else "")


def row_cells(row: ProcessRow) -> tuple[str, ...]:
    flag = "FAST" if row.fast_growing else ("NEW" if row.is_new else "")
    # no growth figure: a new process, or the window has not filled since memsight started
    growth = ("new" if row.is_new else "…") if row.growth_bytes is None else signed_gib(row.growth_bytes, 2)
    return (
        str(row.pid),
        ("● " if row.own else "") + (row.command or row.name)[:40],
        row.user[:12],
        gib_num(row.rss, 2),
        gib_num(row.gpu_bytes, 2),
        growth,
        flag,
    )
