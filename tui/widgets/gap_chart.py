"""Allocated, reserved and the reserved − allocated gap over time (plotext through textual-plotext)."""

from __future__ import annotations

from rich.text import Text
from textual_plotext import PlotextPlot

from tui.widgets.data import ChartSeries

GIB = 2**30


class GapChart(PlotextPlot):
    DEFAULT_CSS = """
    GapChart { height: 12; min-height: 8; }
    GapChart.-empty { height: 2; min-height: 2; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._data: ChartSeries | None = None
        self.draw_count = 0  # how many times the figure was rebuilt (tests / bench: nothing when unchanged)

    @property
    def data(self) -> ChartSeries | None:
        return self._data

    def on_mount(self) -> None:
        super().on_mount()
        self._draw()

    def update_data(self, data: ChartSeries) -> bool:
        if data == self._data:
            return False
        self._data = data
        self.set_class(not data.t and not data.fallback_t, "-empty")
        self._draw()
        self.refresh()
        return True

    def render(self):
        data = self._data
        if data is None or (not data.t and not data.fallback_t):  # nothing to chart: say why in one line
            why = data.missing if data and data.missing else "allocator: waiting for the first sample"
            return Text(f"allocated / reserved / gap: {why}", style="yellow")
        return super().render()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        self.draw_count += 1
        data = self._data
        if data is not None and not data.t and data.fallback_t:
            # the reason is on the agents row already; a title wider than the plot is not drawn at all
            plt.title(f"{data.fallback_label}, GiB, over time (s): no allocator counters to chart")
            plt.plot(
                list(data.fallback_t), [v / GIB for v in data.fallback], label="headroom", color="cyan",
                marker="braille",
            )
            return
        if data is None or not data.t:
            plt.title(data.missing if data and data.missing else "allocator: no PyTorch agent attached yet")
            return
        plt.title("PyTorch allocated / reserved / gap (GiB) over time (s)")
        t = list(data.t)
        plt.plot(t, [v / GIB for v in data.reserved], label="reserved", color="blue", marker="braille")
        plt.plot(t, [v / GIB for v in data.allocated], label="allocated", color="green", marker="braille")
        plt.plot(t, [v / GIB for v in data.gap], label="gap", color="red", marker="braille")
