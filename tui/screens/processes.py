"""Processes: every process the OS collector reports, with resident and (where known) GPU memory,
sortable (s, or click a column) and filterable (/)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Label, Static

from tui.widgets.data import ProcessRow
from tui.widgets.footer import MemsightFooter
from tui.widgets.process_rows import SORT_KEYS
from tui.widgets.process_table import ProcessTable

# a header's first word (the sizes' headers name their unit after it: "RSS MiB")
COLUMN_SORT = {"RSS": "rss", "GPU": "gpu", "Δ30s": "growth", "pid": "pid", "command": "name"}


class ProcessesScreen(Screen):
    BINDINGS = [
        Binding("s", "cycle_sort", "Sort"),
        Binding("slash", "focus_filter", "Filter"),
    ]

    def __init__(self) -> None:
        super().__init__(id="processes")
        self._rows: tuple[ProcessRow, ...] | None = None
        self._status = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="proc-status", classes="status-line")
        with Horizontal(id="proc-filter-row"):
            yield Label("filter: ")
            yield Input(id="proc-filter", placeholder="name, user, command or pid  (Esc: back to the table)")
        yield ProcessTable(id="all-processes")
        yield MemsightFooter()

    def on_mount(self) -> None:
        self._pull()
        self.query_one(ProcessTable).focus()

    def on_screen_resume(self) -> None:
        self._pull()

    def _pull(self) -> None:
        rows = getattr(self.app, "process_rows", None)
        status = getattr(self.app, "process_status", "")
        if rows is not None:
            self.show(rows, status)

    def show(self, rows: tuple[ProcessRow, ...], status: str) -> None:
        table = self.query_one(ProcessTable)
        if rows != self._rows:
            self._rows = rows
            table.update_rows(rows)
        shown = len(table.visible_rows())
        line = f"{shown} of {len(rows)} processes · sorted by {table.sort_key}"
        if table.filter_text:
            line += f" · filter {table.filter_text!r}"
        if status:
            line += f" · {status}"
        if line != self._status:
            self._status = line
            self.query_one("#proc-status", Static).update(line)

    def _refresh_status(self) -> None:
        self._status = ""
        if self._rows is not None:
            self.show(self._rows, getattr(self.app, "process_status", ""))

    def action_cycle_sort(self) -> None:
        """The next sort key; GPU memory only where some process has a GPU figure (on a machine without a
        GPU that order is the pid order under another name: kthreadd on top)."""
        table = self.query_one(ProcessTable)
        keys = SORT_KEYS
        if not any(r.gpu_bytes is not None for r in self._rows or ()):
            keys = tuple(k for k in SORT_KEYS if k != "gpu")
        at = keys.index(table.sort_key) if table.sort_key in keys else -1
        table.set_sort(keys[(at + 1) % len(keys)])
        self._refresh_status()

    def action_focus_filter(self) -> None:
        self.query_one("#proc-filter", Input).focus()

    @on(Input.Changed, "#proc-filter")
    def _filter(self, event: Input.Changed) -> None:
        self.query_one(ProcessTable).set_filter(event.value)
        self._refresh_status()

    @on(Input.Submitted, "#proc-filter")
    def _filter_done(self) -> None:
        self.query_one(ProcessTable).focus()

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        key = COLUMN_SORT.get(str(event.label).split(" ")[0] if str(event.label) else "")
        if key is not None:
            self.query_one(ProcessTable).set_sort(key)
            self._refresh_status()
