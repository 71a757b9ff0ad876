"""Where the pool is: one bar of its parts (GPU, processes, page cache, shared memory, kernel, free) and the
lines that name them. Renders only the PoolData it is given (tui/screens/pool_view.py builds it)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.widgets.data import POOL_PARTS, PoolData
from tui.widgets.fmt import split_cells


class PoolParts(Widget):
    DEFAULT_CSS = """
    PoolParts { height: auto; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._data: PoolData | None = None
        self._shown: tuple | None = None  # the signature of what is drawn (_signature)

    @property
    def data(self) -> PoolData | None:
        return self._data

    def update_data(self, data: PoolData | None) -> bool:
        """Show `data`; returns whether the picture changed. The bytes move at every sample, the figures
        (0.1 GiB) and the bar's cells far less often: only those redraw, and only a new height lays the
        screen out again (a layout re-renders every widget on it)."""
        self.display = data is not None  # before any data too: no empty row for a state without an OS sample
        if data == self._data:
            return False
        self._data = data
        signature = self._signature(data)
        if signature == self._shown:
            return False
        self._shown = signature
        laid_out = self.content_size.height
        self.refresh()
        if not laid_out or self._height() != laid_out:
            self.refresh(layout=True)
        return True

    def _height(self) -> int:
        width = self.content_size.width
        return self.get_content_height(self.content_size, self.app.size, width) if width else 0

    def _cells(self, data: PoolData) -> list[int]:
        values = [max(seg.bytes or 0, 0) for seg in data.parts]
        return split_cells(values, max(self.size.width - 2, 10), data.total)

    def _signature(self, data: PoolData | None) -> tuple | None:
        """What the widget draws: the lines as written and the bar's cells at the current width."""
        if data is None:
            return None
        keys = tuple(seg.key for seg in data.parts)
        return data.title, data.lines, data.alert_lines, keys, tuple(self._cells(data))

    def render(self) -> Text:
        data = self._data
        if data is None:
            return Text("")
        out = Text()
        out.append(data.title, style="bold")
        cells = self._cells(data)
        out.append("\n")
        for seg, n in zip(data.parts, cells, strict=True):
            _, glyph, colour = POOL_PARTS[seg.key]
            out.append(glyph * n, style=colour)
        for line in data.lines:
            out.append("\n" + line)
        for line in data.alert_lines:
            out.append("\n" + line, style="bold yellow")
        return out
