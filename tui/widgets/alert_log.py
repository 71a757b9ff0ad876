"""The alert log: newest last, coloured by severity; only appends what it has not shown yet."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from tui.widgets.data import AlertRow

SEVERITY_STYLES = {"info": "cyan", "warning": "yellow", "critical": "bold red"}


class AlertLog(RichLog):
    DEFAULT_CSS = """
    AlertLog { height: 8; min-height: 4; border: round $warning 50%; overflow-x: hidden; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, max_lines=500, **kwargs)
        self._shown: tuple[AlertRow, ...] = ()
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
        for row in new:
            line = Text()
            line.append(f"{row.when:>9} ", style="grey62")
            line.append(f"{row.severity.upper():8} ", style=SEVERITY_STYLES.get(row.severity, ""))
            line.append(row.message)
            self.write(line)
        self._shown = rows
        self.border_title = f"alerts ({len(rows)})" if rows else "alerts: none so far"
        return True
