"""The roofline lab's figure: attainable GFLOP/s against operational intensity, log-log.

It draws the points it is given (computed by the lab with planner.work.roofline_gflops); it computes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tui.widgets.plot import PlotWidget


@dataclass(frozen=True, slots=True)
class RooflineFigure:
    roof_x: tuple[float, ...]  # FLOP/byte
    roof_y: tuple[float, ...]  # GFLOP/s
    kernel: tuple[float, float]  # the selected kernel (I, ceiling)
    trace: tuple[tuple[float, ...], tuple[float, ...]]  # the roof traced up to position t
    second_roof: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    second_label: str = ""


class RooflinePlot(PlotWidget):
    DEFAULT_CSS = """
    RooflinePlot { height: 1fr; min-height: 10; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._figure: RooflineFigure | None = None

    @property
    def figure(self) -> RooflineFigure | None:
        return self._figure

    def update_figure(self, figure: RooflineFigure) -> bool:
        if figure == self._figure:
            return False
        self._figure = figure
        self._draw()
        self.refresh()
        return True

    def _draw(self) -> None:
        """Log-log by hand: plotext's own log scale re-applies the log at every rebuild of the same data."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        fig = self._figure
        if fig is None:
            return
        plt.title("roofline: min(peak, I × B), log-log; x: intensity I (FLOP/byte), y: GFLOP/s")
        ys = list(fig.roof_y) + [fig.kernel[1]]
        if fig.second_roof is not None:
            ys.extend(fig.second_roof[1])
        x_max = fig.second_roof[0][-1] if fig.second_roof is not None else fig.roof_x[-1]
        x_ticks = [x for x in X_TICKS if fig.roof_x[0] <= x <= x_max]
        plt.xticks([math.log10(x) for x in x_ticks], [f"{x:g}" for x in x_ticks])
        low, high = min(ys) / 2, max(ys) * 2
        y_ticks = [y for y in Y_TICKS if low <= y <= high]
        plt.yticks([math.log10(y) for y in y_ticks], [f"{y:,.0f}" for y in y_ticks])
        # the axis spans every tick it is given: a tick below the data's range was drawn on the x labels' row
        # ("10" before "0.125" read "10.125")
        plt.ylim(math.log10(low), math.log10(high))
        plt.plot(_log(fig.roof_x), _log(fig.roof_y), label="roof", color="blue", marker="braille")
        if fig.second_roof is not None:
            x, y = fig.second_roof
            plt.plot(_log(x), _log(y), label=fig.second_label, color="magenta", marker="braille")
        tx, ty = fig.trace
        if tx:
            plt.scatter(_log(tx), _log(ty), label="trace", color="yellow", marker="•")
        plt.scatter(_log((fig.kernel[0],)), _log((fig.kernel[1],)), label="kernel", color="red", marker="◆")


X_TICKS = (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
Y_TICKS = (1, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000)


def _log(values) -> list[float]:
    return [math.log10(v) for v in values]
