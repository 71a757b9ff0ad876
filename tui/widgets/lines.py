"""Lines of Rich Text drawn as Textual draws them (textual.visual.RichVisual), one line at a time, each line's
strips kept while that line, the width and the style stay the same.

A widget whose figures change in one row (a bucket table where only "other procs / OS" moved) then renders
that row again, not the whole widget: through RichVisual a 13-line BucketBars cost 5-8 ms at every tick,
most of it Rich laying out lines that had not changed. The strips are the ones RichVisual makes of the same
lines stacked in a Group (tests/tui/test_widgets.py holds them to that)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.text import Text
from textual.visual import RichVisual, Visual


def line_key(line: Text) -> tuple:
    """Everything of a Text that its drawing depends on."""
    return (line.plain, tuple(line.spans), line.style, line.justify, line.overflow, line.no_wrap, line.end,
            line.tab_size)  # fmt: skip


class LineCache:
    """A widget's drawn lines: strips and heights of the lines of the picture it drew last (only those: the
    cache never outgrows the widget)."""

    __slots__ = ("heights", "strips")

    def __init__(self) -> None:
        self.heights: dict[tuple, int] = {}
        self.strips: dict[tuple, list] = {}


class LinePicture(Visual):
    """`lines` as one picture, drawn through `cache` (the widget's own LineCache)."""

    def __init__(self, widget, lines: Sequence[Text], cache: LineCache) -> None:
        self._widget = widget
        self.lines = lines
        self._cache = cache

    @property
    def plain(self) -> str:
        return "\n".join(line.plain for line in self.lines)

    def __rich__(self) -> Group:
        """The same lines for a Rich console (what this picture stands for)."""
        return Group(*self.lines)

    def get_optimal_width(self, rules, container_width: int) -> int:
        return max(
            (RichVisual(self._widget, line).get_optimal_width(rules, container_width) for line in self.lines),
            default=0,
        )

    def get_height(self, rules, width: int) -> int:
        known, used = self._cache.heights, {}
        height = 0
        for line in self.lines:
            key = (line_key(line), width)
            lines = known.get(key)
            if lines is None:
                lines = RichVisual(self._widget, line).get_height(rules, width)
            used[key] = lines
            height += lines
        self._cache.heights = used
        return height

    def render_strips(self, width: int, height: int | None, style, options) -> list:
        base = style.rich_style
        known, used = self._cache.strips, {}
        strips: list = []
        for line in self.lines:
            key = (line_key(line), width, base)
            drawn = known.get(key)
            if drawn is None:
                drawn = RichVisual(self._widget, line).render_strips(width, None, style, options)
            used[key] = drawn
            strips.extend(drawn)
        self._cache.strips = used
        return strips if height is None else strips[:height]
