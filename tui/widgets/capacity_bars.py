"""The lesson's capacity figure: one bar per machine, each drawn to its own capacity, with max users."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widget import Widget

from tui.widgets.bucket_bars import stacked_bar
from tui.widgets.data import BUCKET_FILL, BUCKET_LABELS, BUCKET_STYLES, PLANNED_KEYS, MachineBar, Segment
from tui.widgets.fmt import size


def legend() -> Text:
    text = Text()
    for key in PLANNED_KEYS:
        text.append(BUCKET_FILL[key], style=BUCKET_STYLES[key])
        text.append(f" {BUCKET_LABELS[key]}  ")
    return text


class CapacityBars(Widget):
    DEFAULT_CSS = """
    CapacityBars { height: auto; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._bars: tuple[MachineBar, ...] = ()
        self.bar_rows = 1  # lines per bar: a tall terminal draws thicker bars

    def set_bar_rows(self, rows: int) -> None:
        if rows != self.bar_rows:
            self.bar_rows = rows
            self.refresh(layout=True)

    @property
    def bars(self) -> tuple[MachineBar, ...]:
        return self._bars

    def update_bars(self, bars: tuple[MachineBar, ...]) -> bool:
        if bars == self._bars:
            return False
        self._bars = bars
        self.refresh(layout=True)
        return True

    def render(self) -> RenderableType:
        if not self._bars:
            return Text("no plan yet", style="italic")
        width = max(self.size.width, 30)
        lines: list[RenderableType] = [legend()]
        for bar in self._bars:
            lines.extend(_machine_lines(bar, width, self.bar_rows))
        return Group(*lines)


def _machine_lines(bar: MachineBar, width: int, rows: int = 1) -> list[Text]:
    head = Text()
    head.append(f"{bar.label}", style="bold")
    head.append(f" ({size(bar.capacity_bytes)})  ", style="grey62")
    if bar.error:
        head.append(bar.error, style="yellow")
        return [head, Text("")]
    used = sum(s.bytes or 0 for s in bar.segments if s.key != "free")
    if bar.fits:
        head.append("fits ✓", style="bold green")
    else:
        head.append("does not fit ✗", style="bold red")
    head.append(f"  max users @ {bar.context:,} ctx: ", style="")
    head.append("—" if bar.max_users is None else f"{bar.max_users:,}", style="bold")
    head.append(f"   needs {size(used)}", style="grey62")
    capacity = bar.capacity_bytes or 0
    over = used - capacity
    if over > 0:
        head.append(f"  over by {size(over)}", style="red")
    cells = max(width - 2, 10)
    drawn = _clip_to_capacity(bar.segments, capacity)
    line = Text("▕", style="grey62")
    line.append_text(stacked_bar(drawn, cells, capacity))
    line.append("▏" if over <= 0 else "▶", style="grey62" if over <= 0 else "bold red")
    return [head, *([line] * rows)]


def _clip_to_capacity(segments: tuple[Segment, ...], capacity: int) -> tuple[Segment, ...]:
    """Each bar is drawn to its machine's capacity: what does not fit is cut (and reported as 'over by')."""
    left = capacity
    clipped = []
    for seg in segments:
        size = min(max(seg.bytes or 0, 0), max(left, 0))
        clipped.append(Segment(seg.key, size))
        left -= size
    return tuple(clipped)
