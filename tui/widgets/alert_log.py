"""The alert log: newest last, coloured by severity; only appends what it has not shown yet."""

from __future__ import annotations

from rich.text import Text
from textual.cache import LRUCache
from textual.widgets import RichLog

from tui.widgets.data import AlertRow

SEVERITY_STYLES = {"info": "cyan", "warning": "yellow", "critical": "bold red"}
# lines kept to scroll back through: about 100 alerts (most wrap once at the Live screen's width), twice the
# 50 the monitor keeps; each line is held as Textual Strips with their caches, so not more (issue 20)
MAX_LINES = 200
LINE_CACHE = 64  # the drawn lines RichLog keeps (its own default: 1,024)


class AlertLog(RichLog):
    DEFAULT_CSS = """
    AlertLog { height: 8; min-height: 4; border: round $warning 50%; overflow-x: hidden; }
    """

    def __init__(self, **kwargs) -> None:
        # min_width: RichLog renders every line at least 78 cells wide by default, so in a narrower box (the
        # right column at 160 columns is ~60) the end of each alert was cut off instead of wrapped
        super().__init__(
            wrap=True, markup=False, highlight=False, max_lines=MAX_LINES, min_width=20, **kwargs
        )
        # RichLog caches every line it drew (1,024 of them), each with caches of its own: in a box showing six
        # lines, a day's replay held 3 MiB of them (issue 20). A few screens' worth is plenty
        self._line_cache = LRUCache(LINE_CACHE)
        self._shown: tuple[AlertRow, ...] = ()
        self._wrapped_at = 0
        self.border_title = "alerts: none so far"

    @property
    def shown(self) -> tuple[AlertRow, ...]:
        return self._shown

    def update_rows(self, rows: tuple[AlertRow, ...]) -> bool:
        """Append the alerts not shown yet."""
        if rows == self._shown:
            return False
        # The monitor keeps a bounded history, so old alerts fall off the front: continue after the last
        # alert already written; anything else (a new source) starts the log over.
        if self._shown and self._shown[-1] in rows:
            last = len(rows) - 1 - rows[::-1].index(self._shown[-1])
            new = rows[last + 1 :]
        else:
            self.clear()
            new = rows
        self._write_rows(new)
        self._shown = rows
        self.border_title = f"alerts ({len(rows)})" if rows else "alerts: none so far"
        return True

    def _write_rows(self, rows: tuple[AlertRow, ...]) -> None:
        for row in rows:
            line = Text()
            line.append(f"{row.when:>9} ", style="grey62")
            line.append(f"{row.severity.upper():8} ", style=SEVERITY_STYLES.get(row.severity, ""))
            line.append(row.message)
            self.write(line)

    def on_resize(self) -> None:
        """Lines are wrapped when written: a new width wraps them all again."""
        width = self.scrollable_content_region.width
        if width != self._wrapped_at and self._shown:
            self._wrapped_at = width
            self.clear()
            self._write_rows(self._shown)
