"""Headroom gauge: MemAvailable on unified memory, device free on a discrete GPU, coloured by thresholds."""

from __future__ import annotations

from itertools import groupby

from rich.text import Text
from textual.widget import Widget

from tui.widgets.fmt import shown, size

TYPE_CHECKING = False  # typing.TYPE_CHECKING: the Live screen's first frame does not load the data classes
if TYPE_CHECKING:
    from tui.widgets.data import HeadroomData


def headroom_level(data: HeadroomData) -> str:
    """'ok' | 'warning' | 'critical' | 'unknown' from the configured thresholds (bytes)."""
    if data.headroom_bytes is None:
        return "unknown"
    if data.headroom_bytes < data.critical_bytes:
        return "critical"
    if data.headroom_bytes < data.warn_bytes:
        return "warning"
    return "ok"


LEVEL_STYLES = {"ok": "green", "warning": "yellow", "critical": "bold red", "unknown": "grey50"}


def _signature(data: HeadroomData | None) -> tuple | None:
    if data is None:
        return None
    step = 50 * 2**20  # finer than a cell of the gauge; the figures decide as written
    return (
        headroom_level(data),
        size(data.headroom_bytes),
        size(data.total_bytes),
        shown(data.headroom_bytes, step),
        data.source,
        data.warn_bytes,
        data.critical_bytes,
        data.missing,
    )


class HeadroomGauge(Widget):
    DEFAULT_CSS = """
    HeadroomGauge { height: 2; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._data: HeadroomData | None = None
        self._shown: tuple | None = None  # the signature of what is drawn

    @property
    def data(self) -> HeadroomData | None:
        return self._data

    def update_data(self, data: HeadroomData) -> bool:
        if data == self._data:
            return False
        self._data = data
        signature = _signature(data)
        if signature == self._shown:  # the same figure and level at display resolution
            return False
        self._shown = signature
        self.refresh()
        return True

    def render(self) -> Text:
        data = self._data
        if data is None:
            return Text("headroom: waiting for the first sample…", style="italic")
        level = headroom_level(data)
        style = LEVEL_STYLES[level]
        line = Text()
        line.append("headroom ", style="bold")
        if data.headroom_bytes is None:
            line.append(data.missing or "unknown", style="yellow")
            return line
        line.append(size(data.headroom_bytes), style=style)
        if data.total_bytes:
            line.append(f" of {size(data.total_bytes)}")
        line.append(f"  ({data.source})", style="grey62")
        if level != "ok":
            line.append(f"  {level.upper()}", style=style)
        width = max(self.size.width - 2, 10)
        thresholds = f"  warn < {size(data.warn_bytes)}, critical < {size(data.critical_bytes)}"
        if line.cell_len + len(thresholds) <= width:  # one line always: thresholds only where they fit
            line.append(thresholds, style="grey50")
        bar = Text("\n")
        if data.total_bytes:
            free_cells = round(width * min(data.headroom_bytes, data.total_bytes) / data.total_bytes)
            # the warning threshold, measured from the free end of the gauge
            warn_at = width - round(width * min(data.warn_bytes, data.total_bytes) / data.total_bytes)
            used = width - free_cells
            # one run per colour (a span per cell made the gauge the dearest line to draw): used, free, with
            # the warning mark in place of the cell it stands on
            runs = [("█", "grey35")] * used + [("█", style)] * free_cells
            if 0 < warn_at < width:
                runs[warn_at] = ("│", "bold yellow")
            for (glyph, glyph_style), group in groupby(runs):
                bar.append(glyph * len(list(group)), style=glyph_style)
        return line + bar
