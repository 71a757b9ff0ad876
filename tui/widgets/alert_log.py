"""The alert log: newest last, coloured by severity; only appends what it has not shown yet.

A scroll view of its own rather than Textual's RichLog: RichLog imports rich.pretty (for objects that are not
renderables, which this log never writes), 0.3 MiB of the Live screen's resident memory (issue 20). What it
draws is what RichLog drew with wrap=True, markup and highlight off, min_width=20: each alert's Text wrapped
to the box's width when written, kept as Textual Strips, the last MAX_LINES of them, scrolled to the end.
"""

from __future__ import annotations

from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text
from textual.cache import LRUCache
from textual.events import Resize
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.widgets.data import AlertRow

SEVERITY_STYLES = {"info": "cyan", "warning": "yellow", "critical": "bold red"}
# lines kept to scroll back through: about 100 alerts (most wrap once at the Live screen's width), twice the
# 50 the monitor keeps; each line is held as Textual Strips with their caches, so not more (issue 20)
MAX_LINES = 200
LINE_CACHE = 64  # the drawn lines kept (RichLog's default was 1,024, each with caches of its own)
MIN_WIDTH = 20  # narrower than this, a line is cut rather than wrapped one word a line


class AlertLog(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    AlertLog {
        background: $surface; color: $foreground; overflow-y: scroll;
        &:focus { background-tint: $foreground 5%; }
    }
    AlertLog { height: 8; min-height: 4; border: round $warning 50%; overflow-x: hidden; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lines: list[Strip] = []  # the wrapped lines kept, oldest first
        self._start_line = 0  # lines dropped from the front: part of the drawn-line cache's key
        self._widest = 0
        # a day's replay held 3 MiB of RichLog's 1,024 cached lines in a box showing six (issue 20)
        self._line_cache: LRUCache[tuple[int, int, int, int], Strip] = LRUCache(LINE_CACHE)
        self._size_known = False  # lines are wrapped to the box: written once its width is known
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
        if self._size_known:
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
            self._write(line)
        self.virtual_size = Size(self._widest, len(self.lines))
        if rows:
            self.scroll_end(animate=False, immediate=False, x_axis=False)

    def _write(self, text: Text) -> None:
        """One alert, wrapped at the box's width (its own, if narrower; never under MIN_WIDTH)."""
        console = self.app.console
        options = console.options
        widest = Measurement.get(console, options, text).maximum
        width = max(min(widest, self.scrollable_content_region.width), MIN_WIDTH)
        lines = list(Segment.split_lines(console.render(text, options.update_width(width))))
        if not lines:
            self._widest = max(self._widest, width)
            self.lines.append(Strip.blank(width))
            return
        strips = Strip.from_lines(lines)
        for strip in strips:
            strip.adjust_cell_length(width)
        self.lines.extend(strips)
        if len(self.lines) > MAX_LINES:
            self._start_line += len(self.lines) - MAX_LINES
            self.lines = self.lines[-MAX_LINES:]
            self.refresh()
        self._widest = max(self._widest, max(Segment.get_line_length(line) for line in lines))

    def clear(self) -> None:
        self.lines.clear()
        self._line_cache.clear()
        self._start_line = 0
        self._widest = 0
        self.virtual_size = Size(0, 0)
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line_cache.clear()

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return self.virtual_size.width if self._size_known else container.width

    def on_resize(self, event: Resize) -> None:
        """Lines are wrapped when written: the first width writes them, a new one wraps them all again."""
        if event.size.width:
            self._size_known = True
        width = self.scrollable_content_region.width
        if self._size_known and width != self._wrapped_at and self._shown:
            self._wrapped_at = width
            self.clear()
            self._write_rows(self._shown)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        index = scroll_y + y
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style).apply_style(self.rich_style)
        key = (index + self._start_line, scroll_x, width, self._widest)
        line = self._line_cache.get(key)
        if line is None:
            line = self.lines[index].crop_extend(scroll_x, scroll_x + width, self.rich_style)
            self._line_cache[key] = line
        return line.apply_style(self.rich_style)
