"""The roofline lab's figure: attainable GFLOP/s against operational intensity, log-log.

It draws the points it is given (computed by the lab with planner.work.roofline_gflops); it computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual_plotext import PlotextPlot


@dataclass(frozen=True, slots=True)
class RooflineFigure:
    roof_x: tuple[float, ...]  # FLOP/byte
    roof_y: tuple[float, ...]  # GFLOP/s
    kernel: tuple[float, float]  # the selected kernel (I, ceiling)
    trace: tuple[tuple[float, ...], tuple[float, ...]]  # the roof traced up to position t
    second_roof: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    second_label: str = ""


class RooflinePlot(PlotextPlot):
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
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        fig = self._figure
        if fig is None:
            return
        plt.xscale("log")
        plt.yscale("log")
        plt.xlabel("operational intensity I (FLOP/byte)")
        plt.ylabel("GFLOP/s")
        plt.title("roofline: min(peak, I × B)")
        plt.plot(list(fig.roof_x), list(fig.roof_y), label="roof", color="blue", marker="braille")
        if fig.second_roof is not None:
            x, y = fig.second_roof
            plt.plot(list(x), list(y), label=fig.second_label, color="magenta", marker="braille")
        tx, ty = fig.trace
        if tx:
            plt.scatter(list(tx), list(ty), label="trace", color="yellow", marker="•")
        plt.scatter([fig.kernel[0]], [fig.kernel[1]], label="kernel", color="red", marker="◆")
