"""textual-plotext's PlotextPlot as memsight uses it, with plotext imported when a plot is first drawn rather
than when the screens' modules are: plotext and its theme tables cost 1.3 MiB resident, and the Live screen
draws no chart before it has two samples (nor at all where it is hidden, below 40 rows).

Its behaviour is PlotextPlot's (textual_plotext/plotext_plot.py, the "auto" theme: the plot's background and
foreground follow the app's theme), so the pictures are the same (the snapshot tests hold them to that)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.color import Color
from textual.widget import Widget


class PlotWidget(Widget):
    DEFAULT_CSS = """
    PlotWidget { width: 1fr; height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._plot: Any = None  # textual_plotext.plot.Plot, made at the first use of `plt`

    def on_mount(self) -> None:
        # a new app theme redraws the plot in it (its plotext theme is registered when next drawn)
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh())

    @property
    def plt(self) -> Any:
        """The plot (textual_plotext's Plot, used as the plotext module would be)."""
        if self._plot is None:
            from textual_plotext.plot import Plot  # noqa: PLC0415  (the import this class defers)

            self._plot = Plot()
        return self._plot

    def plotext_theme(self) -> str:
        """The plotext theme of the app's theme, registered with plotext as PlotextPlot registers it."""
        from plotext._dict import themes  # noqa: PLC0415
        from textual_plotext.plot import _rgbify_theme, _sequence  # noqa: PLC0415

        name = f"textual-auto-{self.app.theme}"
        if name not in themes:
            variables = self.app.theme_variables
            surface = Color.parse(variables.get("surface")).rgb
            foreground = Color.parse(variables.get("foreground")).rgb
            themes[name] = _rgbify_theme(surface, surface, foreground, "default", _sequence)
        return name

    def sized_plot(self) -> Any:
        """The plot at this widget's size and in the app's theme, ready to build."""
        plot = self.plt
        width, height = self.size
        plot.plotsize(width, height)
        plot._set_size(width, height)  # as PlotextPlot.render (textual-plotext #5)
        plot.theme(self.plotext_theme())
        return plot

    def render(self):
        return Text.from_ansi(self.sized_plot().build())
