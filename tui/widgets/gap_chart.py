"""Allocated, reserved and the reserved − allocated gap over time, drawn in braille by
tui/widgets/braille_chart.py (no plotext: issue 20's resident-memory target)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.timer import Timer
from textual.visual import Visual
from textual.widget import Widget

from tui.widgets.braille_chart import ChartLine, chart_rows
from tui.widgets.data import ChartSeries
from tui.widgets.fmt import unit_for

GIB = 2**30
# The y axis spans at least this much: an axis fitted to the data made a flat headroom drifting by 9 MB fill
# the whole height, which read as a cliff. Headroom moves in GiB; the allocator in fractions of one.
MIN_SPAN_HEADROOM_BYTES = GIB
MIN_SPAN_ALLOCATOR_BYTES = GIB // 2
# A tick that comes this much before the redraw interval is over still redraws: the app's ticks and the
# last redraw are a few ms apart, and a redraw on its own timer, just after the tick, cost a second screen
# update (the whole screen's compositing) every second.
REDRAW_SLACK_S = 0.05


def y_limits(values: Sequence[float], min_span: float) -> tuple[float, float]:
    """(low, high) of a y axis holding every value and spanning at least `min_span`, widened around the
    data's middle, never below 0 (memory is not negative)."""
    finite = [v for v in values if v == v]
    if not finite:
        return 0.0, min_span
    low, high = min(finite), max(finite)
    if high - low >= min_span:
        return low, high
    middle = (low + high) / 2
    low = max(0.0, middle - min_span / 2)
    return low, low + min_span


class GapChart(Widget):
    DEFAULT_CSS = """
    GapChart { height: 12; min-height: 8; }
    GapChart.-empty { height: 2; min-height: 2; }
    """

    def __init__(self, min_redraw_s: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        # A new point arrives every tick, but a time axis read by eye needs no more than a redraw a second:
        # later data waits for the next slot.
        self.min_redraw_s = min_redraw_s
        self._drawn_at = -math.inf
        self._pending: Timer | None = None
        self._data: ChartSeries | None = None
        self.draw_count = 0  # how many times the figure changed (tests / bench: nothing when unchanged)
        # the picture is reused until the figure (draw_count), the size or the theme changes
        self._built: tuple[tuple, ChartPicture] | None = None
        self._styles: dict[str | None, Style | None] = {None: None}  # colour name -> Rich style

    @property
    def data(self) -> ChartSeries | None:
        return self._data

    def on_mount(self) -> None:
        # a new app theme draws the picture again in its colours
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh())
        self._draw()

    def on_resize(self) -> None:
        self._draw()  # the number of points drawn follows the width

    def update_data(self, data: ChartSeries) -> bool:
        if data == self._data:
            return False
        self._data = data
        self.set_class(not data.t and not data.fallback_t, "-empty")
        wait = self.min_redraw_s - (time.monotonic() - self._drawn_at)
        if wait <= REDRAW_SLACK_S or not self.is_mounted:
            self._redraw()
        elif self._pending is None:
            # normally the tick that comes once the interval is over redraws (in the same screen update as
            # the other widgets); the timer, a little later, only when no new data comes by then
            self._pending = self.set_timer(wait + REDRAW_SLACK_S, self._redraw)
        return True

    def _redraw(self) -> None:
        if self._pending is not None:
            self._pending.stop()
        self._pending = None
        self._drawn_at = time.monotonic()
        self._draw()
        self.refresh()

    def render(self):
        data = self._data
        if data is None or (not data.t and not data.fallback_t):  # nothing to chart: say why in one line
            why = data.missing if data and data.missing else "allocator: waiting for the first sample"
            return Text(f"allocated / reserved / gap: {why}", style="yellow")
        key = (self.draw_count, self.size.width, self.size.height, self.app.theme)
        if self._built is None or self._built[0] != key:
            self._built = (key, self._build())
        return self._built[1]

    def _build(self) -> ChartPicture:
        """The braille picture at the widget's size, as runs of one Rich style each."""
        width, height = self.size
        rows = chart_rows(width, height, *self._figure())
        styles = self._styles
        for runs in rows:
            for _chars, color in runs:
                if color not in styles:
                    styles[color] = Style(color=color)
        picture = [[(chars, styles[color]) for chars, color in runs] for runs in rows]
        return ChartPicture(picture, self.app.ansi_theme)

    def _draw(self) -> None:
        """The figure changed (data or size): it is built again when next rendered, which a hidden chart
        never is."""
        self.draw_count += 1

    def _figure(self) -> tuple[str, Sequence[float], list[ChartLine], float, float]:
        """(title, times, lines, y low, y high): the data as many points as the width shows."""
        data = self._data
        if data is not None and not data.t and data.fallback_t:
            t, (headroom,) = decimate(data.fallback_t, (data.fallback,), self._max_points(), min)
            unit = unit_for(int(v) for v in headroom)
            title = f"{data.fallback_label}, {unit.name}, over time (s): no allocator counters to chart"
            values = [v / unit.bytes for v in headroom]
            low, high = y_limits(values, MIN_SPAN_HEADROOM_BYTES / unit.bytes)
            return title, t, [ChartLine(values, "headroom", "cyan")], low, high
        if data is None or not data.t:
            title = data.missing if data and data.missing else "allocator: no PyTorch agent attached yet"
            return title, (), [], 0.0, 1.0
        t, (reserved, allocated, gap) = decimate(
            data.t, (data.reserved, data.allocated, data.gap), self._max_points()
        )
        unit = unit_for(int(v) for v in reserved)  # the largest of the three
        named = ((reserved, "reserved", "blue"), (allocated, "allocated", "green"), (gap, "gap", "red"))
        lines = [ChartLine([v / unit.bytes for v in values], label, color) for values, label, color in named]
        drawn = [v for line in lines for v in line.values]
        low, high = y_limits(drawn, MIN_SPAN_ALLOCATOR_BYTES / unit.bytes)
        return f"PyTorch allocated / reserved / gap ({unit.name}) over time (s)", t, lines, low, high

    def _max_points(self) -> int:
        # braille draws two points per column: more points than that only cost time, never show
        return max(32, 2 * self.size.width)


class ChartPicture(Visual):
    """The chart's runs drawn as strips directly, with the segments Textual's own path (Rich Text, then
    Content.render on the widget's style) makes of them: a styled run is a segment of the widget's style and
    the run's, unstyled runs side by side are one segment of the widget's style, each marked with its offset
    (text selection) as Content marks it."""

    def __init__(self, rows: list[list[tuple[str, Style | None]]], ansi_theme) -> None:
        self.rows = rows
        self.ansi_theme = ansi_theme  # the app's, as Textual converts a Rich style with it

    @property
    def plain(self) -> str:
        """The picture's characters, a line per row (what Text.plain gives of the Text it stands for)."""
        return "\n".join("".join(chars for chars, _ in runs) for runs in self.rows)

    def get_optimal_width(self, rules, container_width: int) -> int:
        return max((sum(len(chars) for chars, _ in runs) for runs in self.rows), default=0)

    def get_height(self, rules, width: int) -> int:
        return len(self.rows)

    def render_strips(self, width: int, height: int | None, style: VisualStyle, options) -> list[Strip]:
        combined: dict[Style | None, VisualStyle] = {None: style}
        strips = []
        for y, runs in enumerate(self.rows if height is None else self.rows[:height]):
            merged: list[tuple[str, Style | None]] = []
            for chars, rich in runs:
                if rich is None and merged and merged[-1][1] is None:
                    merged[-1] = (merged[-1][0] + chars, None)
                else:
                    merged.append((chars, rich))
            segments = []
            x = 0
            for chars, rich in merged:
                text_style = combined.get(rich)
                if text_style is None:
                    span = VisualStyle.from_rich_style(rich, self.ansi_theme)
                    text_style = combined[rich] = VisualStyle.combine([style, span])
                segments.append(Segment(chars, (style + text_style).rich_style_with_offset(x, y)))
                x += len(chars)
            strips.append(Strip(segments, x))
        return strips


def decimate(
    t: Sequence[float],
    series: Sequence[Sequence[float]],
    max_points: int,
    pick: Callable[[Sequence[float]], float] = max,
) -> tuple[list[float], list[list[float]]]:
    """At most `max_points` points: consecutive samples fall into equal buckets, each drawn at its newest
    time with the `pick` (max: a short spike of the gap is never thinned away; min for headroom, whose dips
    are what matter) of each series in it."""
    n = len(t)
    if n <= max_points:
        return list(t), [list(values) for values in series]
    bounds = [round(i * n / max_points) for i in range(max_points + 1)]
    times = [t[end - 1] for end in bounds[1:]]
    return times, [[pick(values[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)] for values in series]
