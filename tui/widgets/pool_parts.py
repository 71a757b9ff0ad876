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

    @property
    def data(self) -> PoolData | None:
        return self._data

    def update_data(self, data: PoolData | None) -> bool:
        self.display = data is not None  # before any data too: no empty row for a state without an OS sample
        if data == self._data:
            return False
        self._data = data
        self.refresh(layout=True)
        return True

    def render(self) -> Text:
        data = self._data
        if data is None:
            return Text("")
        out = Text()
        out.append(data.title, style="bold")
        width = max(self.size.width - 2, 10)
        values = [max(seg.bytes or 0, 0) for seg in data.parts]
        cells = split_cells(values, width, data.total)
        out.append("\n")
        for seg, n in zip(data.parts, cells, strict=True):
            _, glyph, colour = POOL_PARTS[seg.key]
            out.append(glyph * n, style=colour)
        for line in data.lines:
            out.append("\n" + line)
        for line in data.alert_lines:
            out.append("\n" + line, style="bold yellow")
        return out
